"""KubeletClient: plays the kubelet's side of the plugin protocol over the real unix sockets.

Used by tests and by the embedded cluster's stand-in kubelet. It follows the kubelet's sequence: dial the
registration socket, GetInfo, pick the first supported version it knows, NotifyRegistrationStatus, then dial
the advertised endpoint. Like the kubelet it rejects a response whose claim map does not match the request
exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import grpc

from gpudra.agent.kubeletplugin.dra_service import PB_MODULES, claims_to_pb, device_from_pb
from gpudra.agent.kubeletplugin.health_service import HEALTH_PB_MODULES, health_from_pb
from gpudra.agent.kubeletplugin.messages import (
    DRA_PLUGIN_TYPE,
    HEALTH_SERVICES,
    ApiVersion,
    ClaimRef,
    DeviceHealth,
    HealthVersion,
    PluginInfo,
    PrepareResult,
    UnprepareResult,
)
from gpudra.agent.kubeletplugin.pb import (
    dra_health_v1_pb2_grpc,
    dra_health_v1alpha1_pb2_grpc,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2_grpc,
    pluginregistration_pb2,
    pluginregistration_pb2_grpc,
)
from gpudra.errors import KubeletPluginError

KNOWN_VERSIONS: dict[str, ApiVersion] = {"v1.DRAPlugin": "v1", "v1beta1.DRAPlugin": "v1beta1"}
_STUBS = {"v1": dra_v1_pb2_grpc.DRAPluginStub, "v1beta1": dra_v1beta1_pb2_grpc.DRAPluginStub}
_HEALTH_STUBS = {
    "v1": dra_health_v1_pb2_grpc.DRAResourceHealthStub,
    "v1alpha1": dra_health_v1alpha1_pb2_grpc.DRAResourceHealthStub,
}


class KubeletClient:
    """One kubelet's connection to one DRA plugin. ``call_timeout`` is the kubelet's 45 s per call."""

    def __init__(
        self,
        registration_socket: Path,
        *,
        known_versions: Sequence[str] = tuple(KNOWN_VERSIONS),
        info_timeout: float = 10.0,
        call_timeout: float = 45.0,
    ) -> None:
        self.registration_socket = registration_socket
        self.known_versions = [v for v in known_versions if v in KNOWN_VERSIONS]
        self.info_timeout = info_timeout
        self.call_timeout = call_timeout
        self.info: PluginInfo | None = None
        self.api_version: ApiVersion | None = None
        self._registration_channel: grpc.aio.Channel | None = None
        self._channel: grpc.aio.Channel | None = None

    async def register(self, *, accept: bool = True, error: str = "") -> PluginInfo:
        """GetInfo, pick a version, NotifyRegistrationStatus(accept, error); if accepted, dial endpoint."""
        await self.close()
        self._registration_channel = grpc.aio.insecure_channel(f"unix:{self.registration_socket}")
        stub = pluginregistration_pb2_grpc.RegistrationStub(self._registration_channel)
        with _calling(f"GetInfo on {self.registration_socket}"):
            reply = await stub.GetInfo(pluginregistration_pb2.InfoRequest(), timeout=self.info_timeout)
        info = PluginInfo(
            type=reply.type,
            name=reply.name,
            endpoint=reply.endpoint,
            supported_versions=tuple(reply.supported_versions),
        )
        problem = error
        if info.type != DRA_PLUGIN_TYPE:
            problem = f"plugin type {info.type!r} is not {DRA_PLUGIN_TYPE!r}"
        elif not Path(info.endpoint).is_absolute():
            problem = f"endpoint {info.endpoint!r} is not an absolute path"
        else:
            chosen = next((v for v in info.supported_versions if v in self.known_versions), None)
            if chosen is None:
                problem = f"none of the supported versions {list(info.supported_versions)} is known"
            else:
                self.api_version = KNOWN_VERSIONS[chosen]
        registered = accept and not problem
        status = pluginregistration_pb2.RegistrationStatus(plugin_registered=registered, error=problem)
        with _calling("NotifyRegistrationStatus"):
            await stub.NotifyRegistrationStatus(status, timeout=self.info_timeout)
        self.info = info
        if not registered:
            raise KubeletPluginError(f"plugin {info.name!r} not registered: {problem or 'rejected'}")
        self._channel = grpc.aio.insecure_channel(f"unix:{info.endpoint}")
        return info

    async def prepare(
        self, claims: Sequence[ClaimRef], *, api_version: ApiVersion | None = None
    ) -> dict[str, PrepareResult]:
        version, channel = self._target(api_version)
        pb = PB_MODULES[version]
        stub = _STUBS[version](channel)
        request = pb.NodePrepareResourcesRequest(claims=claims_to_pb(pb, claims))
        with _calling("NodePrepareResources"):
            response = await stub.NodePrepareResources(request, timeout=self.call_timeout)
        _check_keys("NodePrepareResources", claims, response.claims)
        return {
            uid: PrepareResult(devices=tuple(device_from_pb(d) for d in r.devices), error=r.error)
            for uid, r in response.claims.items()
        }

    async def unprepare(
        self, claims: Sequence[ClaimRef], *, api_version: ApiVersion | None = None
    ) -> dict[str, UnprepareResult]:
        version, channel = self._target(api_version)
        pb = PB_MODULES[version]
        stub = _STUBS[version](channel)
        request = pb.NodeUnprepareResourcesRequest(claims=claims_to_pb(pb, claims))
        with _calling("NodeUnprepareResources"):
            response = await stub.NodeUnprepareResources(request, timeout=self.call_timeout)
        _check_keys("NodeUnprepareResources", claims, response.claims)
        return {uid: UnprepareResult(error=r.error) for uid, r in response.claims.items()}

    async def watch_health(
        self, version: HealthVersion | None = None
    ) -> AsyncGenerator[list[DeviceHealth], None]:
        """Yield each health update of the plugin's stream until it ends; needs the plugin to advertise it.
        Without ``version``, the newest one the plugin advertises, as the 1.37 kubelet picks."""
        _, channel = self._target(None)
        advertised = [
            s for s in HEALTH_SERVICES if self.info is not None and s in self.info.supported_versions
        ]
        wanted = [f"{version}.DRAResourceHealth"] if version else advertised
        if not wanted or wanted[0] not in advertised:
            raise KubeletPluginError(
                f"plugin does not advertise {wanted[0] if wanted else HEALTH_SERVICES[0]}"
            )
        chosen: HealthVersion = "v1" if wanted[0] == HEALTH_SERVICES[0] else "v1alpha1"
        stub = _HEALTH_STUBS[chosen](channel)
        call = stub.NodeWatchResources(HEALTH_PB_MODULES[chosen].NodeWatchResourcesRequest())
        try:
            with _calling("NodeWatchResources"):
                async for message in call:
                    yield health_from_pb(message)
        finally:
            call.cancel()

    async def close(self) -> None:
        for channel in (self._channel, self._registration_channel):
            if channel is not None:
                await channel.close()
        self._channel = self._registration_channel = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _target(self, api_version: ApiVersion | None) -> tuple[ApiVersion, grpc.aio.Channel]:
        if self._channel is None or self.api_version is None:
            raise KubeletPluginError("not registered: call register() first")
        return api_version or self.api_version, self._channel


def _check_keys(method: str, claims: Sequence[ClaimRef], answered: Any) -> None:
    """A response must answer each claim asked about and no other, in a 1.37 kubelet's words when it does not."""
    wanted = {c.uid for c in claims}
    unknown = sorted(set(answered) - wanted)
    if unknown:
        raise KubeletPluginError(f"{method} returned result for unknown claim UID {unknown[0]}")
    skipped = len(wanted - set(answered))
    if skipped:
        raise KubeletPluginError(f"{method} skipped {skipped} ResourceClaims")


def _go_code(code: grpc.StatusCode) -> str:
    """A gRPC status code as Go's gRPC names it (``Unavailable``, ``DeadlineExceeded``, ``Canceled``)."""
    return "Canceled" if code is grpc.StatusCode.CANCELLED else code.name.title().replace("_", "")


@contextlib.contextmanager
def _calling(what: str) -> Iterator[None]:
    """A failed call as a KubeletPluginError. A call whose channel is closed under it (another caller found the
    plugin's socket gone) raises asyncio's CancelledError in the caller, though nobody cancelled the caller's task:
    taken for a cancellation, it ended a pod's termination without a word and left the pod terminating for good.
    Only a cancellation of the task itself stays one."""
    try:
        yield
    except grpc.aio.AioRpcError as exc:
        raise KubeletPluginError(
            f"{what}: rpc error: code = {_go_code(exc.code())} desc = {exc.details()}"
        ) from exc
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise
        raise KubeletPluginError(
            f"{what}: rpc error: code = Unavailable desc = the connection to the plugin was closed during the call"
        ) from None
