"""The kubelet plugin over real unix sockets, with KubeletClient playing the kubelet."""

from __future__ import annotations

import asyncio
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from clusterkit import eventually
from gpudra.agent.kubeletplugin import (
    CallCounters,
    ClaimRef,
    DeviceHealth,
    HealthStatus,
    HealthVersion,
    KubeletPlugin,
    PreparedDevice,
    PrepareResult,
    UnprepareResult,
)
from gpudra.agent.kubeletplugin.grpccalls import MAX_RECEIVE_BYTES
from gpudra.agent.kubeletplugin.grpcserver import PluginServer
from gpudra.agent.kubeletplugin.kubelet_client import KubeletClient
from gpudra.agent.kubeletplugin.messages import DRA_PLUGIN_TYPE
from gpudra.agent.kubeletplugin.pb import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    pluginregistration_pb2,
    pluginregistration_pb2_grpc,
)
from gpudra.errors import ConfigurationError, InvalidInputError, KubeletPluginError

DRIVER = "gpu.nvidia.com"


def claim(uid: str) -> ClaimRef:
    return ClaimRef(namespace="team-a", uid=uid, name=f"claim-{uid}")


class FakeHandler:
    """Behaviour by UID prefix: ok-*, bad-* (error result), boom-* (raises), drop-* (left out)."""

    def __init__(self) -> None:
        self.prepare_calls: list[list[str]] = []
        self.unprepare_calls: list[list[str]] = []
        self.gate: asyncio.Event | None = None
        self.waiting = 0
        self.expected_waiting = 0
        self.all_waiting = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        self.prepare_calls.append([c.uid for c in claims])
        if self.gate is not None:
            self.waiting += 1
            if self.waiting == self.expected_waiting:
                self.all_waiting.set()
            try:
                await self.gate.wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        if any(c.uid.startswith("boom") for c in claims):
            raise RuntimeError("NVML exploded")
        results: dict[str, PrepareResult] = {}
        for c in claims:
            if c.uid.startswith("drop"):
                continue
            if c.uid.startswith("bad"):
                results[c.uid] = PrepareResult(error="device gpu-3 is already prepared for another claim")
                continue
            results[c.uid] = PrepareResult(
                devices=[
                    PreparedDevice(
                        pool_name="node-1",
                        device_name="gpu-0",
                        request_names=["gpu"],
                        cdi_device_ids=[f"k8s.gpu.nvidia.com/claim={c.uid}-gpu-0"],
                    ),
                    PreparedDevice(
                        pool_name="node-1",
                        device_name="gpu-1",
                        request_names=["shared"],
                        cdi_device_ids=[f"k8s.gpu.nvidia.com/claim={c.uid}-gpu-1"],
                        share_id="4b1c0e2a",
                    ),
                ]
            )
        return results

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, UnprepareResult]:
        self.unprepare_calls.append([c.uid for c in claims])
        if any(c.uid.startswith("boom") for c in claims):
            raise InvalidInputError("checkpoint entry unreadable")
        return {
            c.uid: UnprepareResult(error="busy" if c.uid.startswith("bad") else "")
            for c in claims
            if not c.uid.startswith("drop")
        }


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # unix socket paths are limited to 107 bytes; pytest's tmp_path can be longer
    path = Path(tempfile.mkdtemp(prefix="gd", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def handler() -> FakeHandler:
    return FakeHandler()


def make_plugin(short_dir: Path, handler: FakeHandler, **kwargs: object) -> KubeletPlugin:
    return KubeletPlugin(
        DRIVER,
        handler,
        plugin_dir=short_dir / "plugins" / DRIVER,
        registry_dir=short_dir / "registry",
        # the ignore below: the plugin's keyword options, passed through as each test names them
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture
async def counters() -> CallCounters:
    return CallCounters()


@pytest.fixture
async def plugin(
    short_dir: Path, handler: FakeHandler, counters: CallCounters
) -> AsyncIterator[KubeletPlugin]:
    plugin = make_plugin(short_dir, handler, observer=counters)
    await plugin.start()
    yield plugin
    await plugin.stop()


@pytest.fixture
async def kubelet(plugin: KubeletPlugin) -> AsyncIterator[KubeletClient]:
    async with KubeletClient(plugin.registration_socket) as client:
        await client.register()
        yield client


async def test_registration_answers_get_info_and_records_status(plugin: KubeletPlugin) -> None:
    assert plugin.registration_socket == plugin.registry_dir / "gpu.nvidia.com-reg.sock"
    before = plugin.registration_state
    async with KubeletClient(plugin.registration_socket) as client:
        info = await client.register()
    assert before.registered is False
    assert info.type == "DRAPlugin"
    assert info.name == DRIVER
    assert info.endpoint == str(plugin.dra_socket)
    assert Path(info.endpoint).is_absolute()
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    assert client.api_version == "v1"
    assert plugin.registration_state.registered is True
    assert plugin.registration_state.notifications == 1


async def test_kubelet_rejection_is_recorded_with_its_error(plugin: KubeletPlugin) -> None:
    async with KubeletClient(plugin.registration_socket) as client:
        with pytest.raises(KubeletPluginError, match="driver name taken"):
            await client.register(accept=False, error="driver name taken")
    assert plugin.registration_state.registered is False
    assert plugin.registration_state.error == "driver name taken"


async def test_kubelet_that_knows_only_v1beta1_picks_it(plugin: KubeletPlugin, handler: FakeHandler) -> None:
    async with KubeletClient(plugin.registration_socket, known_versions=["v1beta1.DRAPlugin"]) as client:
        await client.register()
        assert client.api_version == "v1beta1"
        results = await client.prepare([claim("ok-1")])
    assert results["ok-1"].error == ""


@pytest.mark.parametrize("api_version", ["v1", "v1beta1"])
async def test_prepare_and_unprepare_round_trip(
    kubelet: KubeletClient, handler: FakeHandler, api_version: str
) -> None:
    # the ignore below: api_version: one of the client's literal versions, parametrized as a str
    results = await kubelet.prepare([claim("ok-1"), claim("ok-2")], api_version=api_version)  # type: ignore[arg-type]
    assert set(results) == {"ok-1", "ok-2"}
    first, second = results["ok-1"].devices
    assert (first.pool_name, first.device_name, list(first.request_names)) == ("node-1", "gpu-0", ["gpu"])
    assert list(first.cdi_device_ids) == ["k8s.gpu.nvidia.com/claim=ok-1-gpu-0"]
    assert first.share_id is None
    assert second.share_id == "4b1c0e2a"
    assert handler.prepare_calls == [["ok-1", "ok-2"]]

    # the ignore below: api_version: one of the client's literal versions, parametrized as a str
    unprepared = await kubelet.unprepare([claim("ok-1"), claim("ok-2")], api_version=api_version)  # type: ignore[arg-type]
    assert unprepared == {"ok-1": UnprepareResult(), "ok-2": UnprepareResult()}


async def test_repeated_calls_give_the_same_answer(kubelet: KubeletClient, handler: FakeHandler) -> None:
    first = await kubelet.prepare([claim("ok-1")])
    second = await kubelet.prepare([claim("ok-1")])
    assert first == second
    assert await kubelet.unprepare([claim("ok-1")]) == await kubelet.unprepare([claim("ok-1")])
    assert len(handler.prepare_calls) == 2


async def test_duplicate_claims_in_one_request_are_prepared_once(
    kubelet: KubeletClient, handler: FakeHandler
) -> None:
    results = await kubelet.prepare([claim("ok-1"), claim("ok-1")])
    assert set(results) == {"ok-1"}
    assert handler.prepare_calls == [["ok-1"]]


async def test_calls_for_different_pods_run_concurrently(
    kubelet: KubeletClient, handler: FakeHandler
) -> None:
    handler.gate = asyncio.Event()
    handler.expected_waiting = 6
    calls = [
        asyncio.create_task(kubelet.prepare([claim(f"ok-{i}")], api_version="v1" if i % 2 else "v1beta1"))
        for i in range(6)
    ]
    # every call reaches the handler before any finishes: nothing serializes them
    await handler.all_waiting.wait()
    handler.gate.set()
    results = await asyncio.gather(*calls)
    assert [set(r) for r in results] == [{f"ok-{i}"} for i in range(6)]


async def held_prepare(
    kubelet: KubeletClient, handler: FakeHandler
) -> asyncio.Task[dict[str, PrepareResult]]:
    """A prepare call that has reached the plugin's handler and is held there until ``handler.gate`` is set."""
    handler.gate = asyncio.Event()
    handler.expected_waiting = 1
    call = asyncio.create_task(kubelet.prepare([claim("ok-0")]))
    await handler.all_waiting.wait()
    return call


async def test_a_call_cut_off_by_closing_the_client_fails_as_a_plugin_error(
    kubelet: KubeletClient, handler: FakeHandler
) -> None:
    # the stand-in kubelet closes a plugin's client when its socket goes (an agent restarting) while another of
    # its tasks may still be in a call: that caller must see a failed call it can retry, not a cancellation
    call = await held_prepare(kubelet, handler)
    await kubelet.close()
    with pytest.raises(
        KubeletPluginError,
        match=r"^NodePrepareResources: rpc error: code = Unavailable desc = .*closed during the call$",
    ):
        await call


async def test_cancelling_the_caller_still_cancels_its_call(
    kubelet: KubeletClient, handler: FakeHandler
) -> None:
    call = await held_prepare(kubelet, handler)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    # the kubelet gave up on the call: the plugin's handler hears of it
    await asyncio.wait_for(handler.cancelled.wait(), 10)


async def test_the_kubelets_deadline_cancels_the_handler(short_dir: Path, handler: FakeHandler) -> None:
    handler.gate = asyncio.Event()
    async with (
        make_plugin(short_dir, handler) as plugin,
        KubeletClient(plugin.registration_socket, call_timeout=0.5) as client,
    ):
        await client.register()
        with pytest.raises(
            KubeletPluginError, match=r"^NodePrepareResources: rpc error: code = DeadlineExceeded desc = "
        ):
            await client.prepare([claim("ok-0")])
        await asyncio.wait_for(handler.cancelled.wait(), 10)


async def test_an_unknown_method_is_unimplemented(plugin: KubeletPlugin) -> None:
    # a kubelet dialing a service the plugin does not serve (here the health stream, not advertised without a
    # source) or a method of a newer API gets UNIMPLEMENTED, as from any gRPC server
    async with grpc.aio.insecure_channel(f"unix:{plugin.dra_socket}") as channel:
        for path in (
            "/v1.DRAResourceHealth/NodeWatchResources",
            "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeFrobnicateResources",
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await channel.unary_unary(path)(b"")
            assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED, path


async def test_a_request_over_4_mib_is_refused_before_the_handler_sees_it(
    kubelet: KubeletClient, handler: FakeHandler
) -> None:
    with pytest.raises(
        KubeletPluginError, match=r"^NodePrepareResources: rpc error: code = ResourceExhausted "
    ):
        await kubelet.prepare([ClaimRef(namespace="team-a", uid="ok-1", name="x" * MAX_RECEIVE_BYTES)])
    assert handler.prepare_calls == []
    # just under the limit is served (the request adds some 20 bytes to the name)
    under = ClaimRef(namespace="team-a", uid="ok-2", name="x" * (MAX_RECEIVE_BYTES - 100))
    assert (await kubelet.prepare([under]))["ok-2"].error == ""


async def _refused_while_stopping(client: KubeletClient) -> str:
    """Call (unprepares are not held by the gate) until the stopping plugin refuses a new call; its error."""

    async def refused() -> str | None:
        try:
            await client.unprepare([claim("ok-9")])
        except KubeletPluginError as exc:
            return str(exc)
        return None

    return await eventually(refused, 10, interval=0.01, what="a new call refused")


async def test_stop_lets_a_call_in_flight_finish_within_the_grace_and_refuses_new_ones(
    short_dir: Path, handler: FakeHandler
) -> None:
    plugin = make_plugin(short_dir, handler, stop_grace_seconds=60)
    await plugin.start()
    async with KubeletClient(plugin.registration_socket) as client:
        await client.register()
        call = await held_prepare(client, handler)
        stopping = asyncio.create_task(plugin.stop())
        refused = await asyncio.wait_for(_refused_while_stopping(client), 10)
        assert refused.startswith("NodeUnprepareResources: rpc error: code = Unavailable desc = "), refused
        assert not plugin.registration_socket.exists()  # deregistered first, without a grace
        assert not stopping.done()
        assert handler.gate is not None
        handler.gate.set()
        assert (await call)["ok-0"].error == ""
        await asyncio.wait_for(stopping, 10)
    assert not handler.cancelled.is_set()
    assert not plugin.dra_socket.exists()


async def test_stop_cancels_the_calls_still_running_after_the_grace(
    short_dir: Path, handler: FakeHandler
) -> None:
    plugin = make_plugin(short_dir, handler, stop_grace_seconds=0.2)
    await plugin.start()
    async with KubeletClient(plugin.registration_socket) as client:
        await client.register()
        call = await held_prepare(client, handler)
        await asyncio.wait_for(plugin.stop(), 10)
        assert handler.cancelled.is_set()
        with pytest.raises(KubeletPluginError):
            await call


async def test_after_a_stop_the_kubelets_connection_reaches_the_plugin_listening_there_now(
    short_dir: Path, handler: FakeHandler
) -> None:
    # an agent restarted in place: the kubelet's open connection to the old one is closed, so its next call
    # dials the socket's path again and reaches the new one. A call sent before the client has seen the old
    # connection close fails UNAVAILABLE ("Broken pipe"), and the kubelet retries its pod: so does this test
    async with KubeletClient(make_plugin(short_dir, handler).registration_socket) as client:
        async with make_plugin(short_dir, handler):
            await client.register()
            assert (await client.prepare([claim("ok-1")]))["ok-1"].error == ""
        newer = FakeHandler()
        refused: list[str] = []

        async def answered() -> dict[str, PrepareResult] | None:
            try:
                return await client.prepare([claim("ok-2")])
            except KubeletPluginError as exc:
                refused.append(str(exc))
                return None

        async with make_plugin(short_dir, newer):
            answer = await eventually(answered, 10, what="a call reaching the new plugin")
    assert answer["ok-2"].error == ""
    assert all(why.startswith("NodePrepareResources: rpc error: code = Unavailable ") for why in refused), (
        refused
    )
    assert newer.prepare_calls == [["ok-2"]]
    assert handler.prepare_calls == [["ok-1"]]


async def test_a_socket_that_cannot_be_bound_is_a_clear_error(short_dir: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot listen on"):
        await PluginServer().start(short_dir / "no-such-directory" / "dra.sock")


async def test_a_failing_claim_does_not_fail_its_neighbours(kubelet: KubeletClient) -> None:
    results = await kubelet.prepare([claim("ok-1"), claim("bad-1")])
    assert results["ok-1"].error == ""
    assert len(results["ok-1"].devices) == 2
    assert results["bad-1"].error == "device gpu-3 is already prepared for another claim"
    assert results["bad-1"].devices == ()


async def test_handler_exception_becomes_a_per_claim_error(
    kubelet: KubeletClient, handler: FakeHandler
) -> None:
    results = await kubelet.prepare([claim("ok-1"), claim("boom-1")])
    assert results["ok-1"].error == ""
    assert "RuntimeError: NVML exploded" in results["boom-1"].error
    # the batch failed as a whole, so each claim was retried on its own
    assert handler.prepare_calls == [["ok-1", "boom-1"], ["ok-1"], ["boom-1"]]

    unprepared = await kubelet.unprepare([claim("boom-2")])
    assert unprepared["boom-2"].error == "unprepare failed: checkpoint entry unreadable"


class _ForeignPlugin:
    """Another driver's plugin, registration and DRA service on one socket, whose answers name the claims in
    ``answered`` whatever it is asked."""

    def __init__(self, socket_path: Path, answered: list[str]) -> None:
        self.socket_path = socket_path
        self.answered = answered

    async def GetInfo(self, request: Any, context: Any) -> Any:
        return pluginregistration_pb2.PluginInfo(
            type=DRA_PLUGIN_TYPE, name="other.example.com", endpoint=str(self.socket_path),
            supported_versions=["v1.DRAPlugin"],
        )  # fmt: skip

    async def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        return pluginregistration_pb2.RegistrationStatusResponse()

    async def NodePrepareResources(self, request: Any, context: Any) -> Any:
        return dra_v1_pb2.NodePrepareResourcesResponse(
            claims={uid: dra_v1_pb2.NodePrepareResourceResponse() for uid in self.answered}
        )

    async def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        return dra_v1_pb2.NodeUnprepareResourcesResponse(
            claims={uid: dra_v1_pb2.NodeUnprepareResourceResponse() for uid in self.answered}
        )


async def test_a_plugin_answering_other_claims_than_asked_is_said_as_a_kubelet_says_it(
    short_dir: Path,
) -> None:
    """Another driver's plugin whose answer leaves a claim out, or answers one not asked about, fails the call in
    a 1.37 kubelet's words (gpudra's plugin fills in and drops: the next test)."""
    answered: list[str] = []
    plugin = _ForeignPlugin(short_dir / "other.sock", answered)
    server = grpc.aio.server()
    dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(plugin, server)
    pluginregistration_pb2_grpc.add_RegistrationServicer_to_server(plugin, server)
    server.add_insecure_port(f"unix:{plugin.socket_path}")
    await server.start()
    try:
        async with KubeletClient(plugin.socket_path) as client:
            await client.register()
            answered[:] = ["ok-1"]
            with pytest.raises(KubeletPluginError, match=r"^NodePrepareResources skipped 1 ResourceClaims$"):
                await client.prepare([claim("ok-1"), claim("ok-2")])
            answered[:] = ["ok-3", "stray"]
            with pytest.raises(
                KubeletPluginError,
                match=r"^NodeUnprepareResources returned result for unknown claim UID stray$",
            ):
                await client.unprepare([claim("ok-3")])
            answered[:] = ["ok-3"]
            assert (await client.prepare([claim("ok-3")]))["ok-3"].error == ""  # answered as asked
    finally:
        await server.stop(None)


async def test_claim_dropped_by_handler_gets_an_error_entry(kubelet: KubeletClient) -> None:
    results = await kubelet.prepare([claim("ok-1"), claim("drop-1")])
    assert results["ok-1"].error == ""
    assert "no result" in results["drop-1"].error
    unprepared = await kubelet.unprepare([claim("drop-2")])
    assert "no result" in unprepared["drop-2"].error


async def test_results_for_claims_not_asked_for_are_left_out(short_dir: Path, handler: FakeHandler) -> None:
    async def chatty(claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        return {"stranger": PrepareResult()} | {c.uid: PrepareResult() for c in claims}

    # the ignore below: a fault injected into this one handler
    handler.prepare = chatty  # type: ignore[method-assign]
    async with make_plugin(short_dir, handler) as plugin, KubeletClient(plugin.registration_socket) as client:
        await client.register()
        assert set(await client.prepare([claim("ok-1")])) == {"ok-1"}


async def test_observer_sees_every_call(kubelet: KubeletClient, counters: CallCounters) -> None:
    await kubelet.prepare([claim("ok-1"), claim("bad-1")])
    await kubelet.unprepare([claim("ok-1")], api_version="v1beta1")
    assert counters.in_flight == 0
    assert counters.calls == {("prepare", "v1"): 1, ("unprepare", "v1beta1"): 1}
    assert counters.claims == {"prepare": 2, "unprepare": 1}
    assert counters.failed_claims == {"prepare": 1, "unprepare": 0}


async def test_stale_socket_files_are_replaced(short_dir: Path, handler: FakeHandler) -> None:
    plugin = make_plugin(short_dir, handler)
    plugin.plugin_dir.mkdir(parents=True)
    plugin.registry_dir.mkdir(parents=True)
    # a socket left by a crashed process, and a plain file where a socket belongs
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(plugin.dra_socket))
    stale.close()
    plugin.registration_socket.write_text("junk")
    async with plugin, KubeletClient(plugin.registration_socket) as client:
        await client.register()
        assert (await client.prepare([claim("ok-1")]))["ok-1"].error == ""


async def test_stop_removes_own_sockets_only(short_dir: Path, handler: FakeHandler) -> None:
    plugin = make_plugin(short_dir, handler)
    await plugin.start()
    assert plugin.dra_socket.is_socket()
    assert plugin.registration_socket.is_socket()
    await plugin.stop()
    assert not plugin.dra_socket.exists()
    assert not plugin.registration_socket.exists()

    # a newer agent replaced the registration socket while this one was running: leave it alone
    await plugin.start()
    plugin.registration_socket.unlink()
    plugin.registration_socket.write_text("the new agent's")
    await plugin.stop()
    assert plugin.registration_socket.read_text() == "the new agent's"
    assert not plugin.dra_socket.exists()


async def test_unregistered_client_refuses_calls(plugin: KubeletPlugin) -> None:
    async with KubeletClient(plugin.registration_socket) as client:
        with pytest.raises(KubeletPluginError, match="register"):
            await client.prepare([claim("ok-1")])


async def test_socket_path_too_long_is_a_clear_error(short_dir: Path, handler: FakeHandler) -> None:
    plugin = make_plugin(short_dir / ("x" * 120), handler)
    with pytest.raises(ConfigurationError, match="longer than 107 bytes"):
        await plugin.start()


def test_invalid_driver_name_is_rejected(handler: FakeHandler) -> None:
    with pytest.raises(ConfigurationError, match="DNS subdomain"):
        KubeletPlugin("GPU/nvidia", handler)


@pytest.mark.parametrize("version", ["v1", "v1alpha1"])
async def test_health_stream_is_advertised_and_streams_updates_in_both_versions(
    short_dir: Path, handler: FakeHandler, version: HealthVersion
) -> None:
    updates = [
        [DeviceHealth("node-1", "gpu-0", HealthStatus.HEALTHY, 1700000000, 30)],
        [DeviceHealth("node-1", "gpu-0", HealthStatus.UNHEALTHY, 1700000060, 30, message="XID 79")],
    ]

    async def source() -> AsyncIterator[Sequence[DeviceHealth]]:
        for update in updates:
            yield update

    plugin = make_plugin(short_dir, handler, health_source=source)
    async with plugin, KubeletClient(plugin.registration_socket) as client:
        info = await client.register()
        # newest first: a 1.37 kubelet takes the first it knows (v1), older ones find v1alpha1
        assert [v for v in info.supported_versions if "Health" in v] == [
            "v1.DRAResourceHealth",
            "v1alpha1.DRAResourceHealth",
        ]
        received = [update async for update in client.watch_health(version)]
    assert received == updates


async def test_health_stream_is_not_advertised_without_a_source(kubelet: KubeletClient) -> None:
    assert kubelet.info is not None
    assert not [v for v in kubelet.info.supported_versions if "DRAResourceHealth" in v]
    with pytest.raises(KubeletPluginError, match="does not advertise"):
        async for _ in kubelet.watch_health():
            pass


async def test_unusable_handler_result_becomes_an_error_entry(short_dir: Path, handler: FakeHandler) -> None:
    async def sloppy(claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        # the ignore below: a wrong type on purpose: the plugin must refuse what a buggy handler returns
        device = PreparedDevice(pool_name=7, device_name="gpu-0")  # type: ignore[arg-type]
        return {c.uid: PrepareResult(devices=[device]) for c in claims}

    # the ignore below: a fault injected into this one handler
    handler.prepare = sloppy  # type: ignore[method-assign]
    plugin = make_plugin(short_dir, handler)
    async with plugin, KubeletClient(plugin.registration_socket) as client:
        await client.register()
        result = (await client.prepare([claim("ok-1")]))["ok-1"]
    assert "unusable prepare result" in result.error
    assert result.devices == ()
