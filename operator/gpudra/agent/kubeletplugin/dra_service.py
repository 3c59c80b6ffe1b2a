"""The DRAPlugin gRPC service (v1 and v1beta1): protobuf <-> PluginHandler, kubelet guarantees kept.

The kubelet discards a whole response on an RPC error and fails the pod if a requested claim is missing from
the response map. So this layer never lets one claim's trouble become an RPC error: handler exceptions and
claims the handler forgot become per-claim error strings, and entries for claims that were not asked for are
dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import ModuleType
from typing import Any, TypeVar

from gpudra.agent.kubeletplugin.messages import (
    ApiVersion,
    CallObserver,
    CallRecord,
    ClaimRef,
    Method,
    PluginHandler,
    PreparedDevice,
    PrepareResult,
    UnprepareResult,
)
from gpudra.agent.kubeletplugin.pb import dra_v1_pb2, dra_v1beta1_pb2
from gpudra.errors import GpudraError

log = logging.getLogger(__name__)

PB_MODULES: dict[ApiVersion, ModuleType] = {"v1": dra_v1_pb2, "v1beta1": dra_v1beta1_pb2}

_R = TypeVar("_R", PrepareResult, UnprepareResult)


def claims_from_pb(claims: Sequence[Any]) -> list[ClaimRef]:
    """Claims of a request, de-duplicated by UID (first occurrence wins), in request order."""
    seen: dict[str, ClaimRef] = {}
    for claim in claims:
        seen.setdefault(claim.uid, ClaimRef(namespace=claim.namespace, uid=claim.uid, name=claim.name))
    return list(seen.values())


def claims_to_pb(pb: ModuleType, claims: Sequence[ClaimRef]) -> list[Any]:
    return [pb.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]


def device_to_pb(pb: ModuleType, device: PreparedDevice) -> Any:
    message = pb.Device(
        request_names=list(device.request_names),
        pool_name=device.pool_name,
        device_name=device.device_name,
        cdi_device_ids=list(device.cdi_device_ids),
    )
    if device.share_id is not None:
        message.share_id = device.share_id
    return message


def device_from_pb(message: Any) -> PreparedDevice:
    return PreparedDevice(
        pool_name=message.pool_name,
        device_name=message.device_name,
        request_names=tuple(message.request_names),
        cdi_device_ids=tuple(message.cdi_device_ids),
        share_id=message.share_id if message.HasField("share_id") else None,
    )


def describe_exception(exc: BaseException) -> str:
    """A per-claim error text: gpudra's own errors speak for themselves, anything else names its type."""
    if isinstance(exc, GpudraError):
        return str(exc)
    return f"internal error ({type(exc).__name__}: {exc})"


class DRAPluginServicer:
    """Implements DRAPlugin for one API version; the same handler serves both versions."""

    def __init__(
        self,
        api_version: ApiVersion,
        handler: PluginHandler,
        observer: CallObserver | None = None,
    ) -> None:
        self.api_version: ApiVersion = api_version
        self._pb = PB_MODULES[api_version]
        self._handler = handler
        self._observer = observer

    async def NodePrepareResources(self, request: Any, context: Any) -> Any:
        claims = claims_from_pb(request.claims)
        started = self._notify_started("prepare", len(claims))
        response = self._pb.NodePrepareResourcesResponse()
        crashed = False
        try:
            results, crashed = await self._call("prepare", claims, self._handler.prepare, PrepareResult)
            for claim in claims:
                self._fill_prepared(claim, results[claim.uid], response.claims[claim.uid])
            return response
        finally:
            self._finish("prepare", claims, response, crashed, started)

    async def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        claims = claims_from_pb(request.claims)
        started = self._notify_started("unprepare", len(claims))
        response = self._pb.NodeUnprepareResourcesResponse()
        crashed = False
        try:
            results, crashed = await self._call("unprepare", claims, self._handler.unprepare, UnprepareResult)
            for claim in claims:
                response.claims[claim.uid].error = str(results[claim.uid].error)
            return response
        finally:
            self._finish("unprepare", claims, response, crashed, started)

    def _fill_prepared(self, claim: ClaimRef, result: PrepareResult, entry: Any) -> None:
        try:
            entry.devices.extend(device_to_pb(self._pb, d) for d in result.devices)
            entry.error = result.error
        except (TypeError, ValueError, AttributeError) as exc:
            log.error("claim %s: handler returned an unusable prepare result: %s", claim.uid, exc)
            entry.Clear()
            entry.error = f"internal error (unusable prepare result: {exc})"

    async def _call(
        self,
        method: Method,
        claims: list[ClaimRef],
        call: Callable[[Sequence[ClaimRef]], Awaitable[Mapping[str, _R]]],
        result_type: type[_R],
    ) -> tuple[dict[str, _R], bool]:
        """Call the handler; return one result per claim and whether the handler raised."""
        if not claims:
            return {}, False
        try:
            return self._complete(method, claims, await call(claims), result_type), False
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("%s of %d claim(s) raised", method, len(claims))
            if len(claims) == 1:
                return {claims[0].uid: result_type(error=f"{method} failed: {describe_exception(exc)}")}, True
        # Retry one by one so that a single bad claim does not fail the others in the batch.
        singles = await asyncio.gather(*(self._single(method, c, call, result_type) for c in claims))
        return {c.uid: r for c, r in zip(claims, singles, strict=True)}, True

    async def _single(
        self,
        method: Method,
        claim: ClaimRef,
        call: Callable[[Sequence[ClaimRef]], Awaitable[Mapping[str, _R]]],
        result_type: type[_R],
    ) -> _R:
        try:
            return self._complete(method, [claim], await call([claim]), result_type)[claim.uid]
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("%s of claim %s raised", method, claim.uid)
            return result_type(error=f"{method} failed: {describe_exception(exc)}")

    @staticmethod
    def _complete(
        method: Method, claims: list[ClaimRef], results: Mapping[str, _R], result_type: type[_R]
    ) -> dict[str, _R]:
        """One result per requested claim: forgotten claims get an error, unrequested entries are dropped."""
        if not isinstance(results, Mapping):
            raise TypeError(
                f"handler.{method} returned {type(results).__name__}, not a mapping of claim UIDs"
            )
        wanted = {c.uid for c in claims}
        extra = sorted(set(results) - wanted)
        if extra:
            log.warning("%s: handler returned results for claims not asked for, dropped: %s", method, extra)
        completed: dict[str, _R] = {}
        for claim in claims:
            result = results.get(claim.uid)
            if isinstance(result, result_type):
                completed[claim.uid] = result
            elif result is None:
                log.error("%s: handler returned no result for claim %s", method, claim.uid)
                completed[claim.uid] = result_type(
                    error=f"internal error: {method} returned no result for claim"
                )
            else:
                completed[claim.uid] = result_type(
                    error=f"internal error: {method} returned {type(result).__name__} for claim"
                )
        return completed

    def _notify_started(self, method: Method, claims: int) -> float:
        if self._observer is not None:
            try:
                self._observer.started(method, self.api_version, claims)
            except Exception:
                log.exception("call observer failed")
        return time.monotonic()

    def _finish(
        self, method: Method, claims: list[ClaimRef], response: Any, crashed: bool, started: float
    ) -> None:
        failed = 0
        for claim in claims:
            error = response.claims[claim.uid].error if claim.uid in response.claims else "cancelled"
            if error:
                failed += 1
                log.warning(
                    "%s of %s/%s (%s) failed: %s", method, claim.namespace, claim.name, claim.uid, error
                )
        if self._observer is None:
            return
        record = CallRecord(
            method=method,
            api_version=self.api_version,
            claims=len(claims),
            failed_claims=failed,
            duration_seconds=time.monotonic() - started,
            handler_exception=crashed,
        )
        try:
            self._observer.finished(record)
        except Exception:
            log.exception("call observer failed")
