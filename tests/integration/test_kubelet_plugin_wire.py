"""The kubelet plugin's socket given requests no gRPC client sends: each is answered with a clear status, and the
plugin keeps serving.

The plugin's HTTP/2 layer does not validate request headers (h2's header validation is off, as grpclib sets it):
its socket is a root-only unix socket that only the kubelet dials, and the plugin reads only the few headers a
gRPC call needs. These tests send such requests with h2 itself, its own validation off too.
"""

from __future__ import annotations

import asyncio
import shutil
import struct
import tempfile
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import pytest

from gpudra.agent.kubeletplugin import ClaimRef, KubeletPlugin, PrepareResult, UnprepareResult
from gpudra.agent.kubeletplugin.kubelet_client import KubeletClient
from gpudra.agent.kubeletplugin.pb import dra_v1_pb2

pytestmark = pytest.mark.timeout(30)

PREPARE = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
CALL = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", PREPARE),
    (":authority", "localhost"),
    ("content-type", "application/grpc"),
    ("te", "trailers"),
    ("grpc-timeout", "45S"),
]


class Handler:
    def __init__(self) -> None:
        self.prepared: list[str] = []
        self.held = asyncio.Event()  # a prepare of a claim "held-*" is waiting for ``release``
        self.release = asyncio.Event()

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        self.prepared += [c.uid for c in claims]
        if any(c.uid.startswith("held") for c in claims):
            self.held.set()
            await self.release.wait()
        return {c.uid: PrepareResult() for c in claims}

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, UnprepareResult]:
        return {c.uid: UnprepareResult() for c in claims}


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gw", dir="/tmp"))  # unix socket paths are limited to 107 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def handler() -> Handler:
    return Handler()


@pytest.fixture
async def plugin(short_dir: Path, handler: Handler) -> AsyncIterator[KubeletPlugin]:
    plugin = KubeletPlugin(
        "gpu.nvidia.com",
        handler,
        plugin_dir=short_dir / "p",
        registry_dir=short_dir / "r",
        stop_grace_seconds=20,
    )
    async with plugin:
        yield plugin


def message(body: bytes, *, compressed: bool = False) -> bytes:
    return struct.pack(">?I", compressed, len(body)) + body


async def raw_call(socket: Path, headers: list[tuple[str, str]], body: bytes | None) -> dict[str, str]:
    """Send one request as given, without h2's checks; the answer's headers and trailers, merged."""
    reader, writer = await asyncio.open_unix_connection(str(socket))
    config = h2.config.H2Configuration(
        client_side=True,
        header_encoding="ascii",
        validate_outbound_headers=False,
        normalize_outbound_headers=False,
        validate_inbound_headers=False,
    )
    connection = h2.connection.H2Connection(config=config)
    connection.initiate_connection()
    connection.send_headers(1, headers, end_stream=body is None)
    if body is not None:
        connection.send_data(1, body, end_stream=True)
    writer.write(connection.data_to_send())
    answer: dict[str, str] = {}
    try:
        while True:
            data = await reader.read(65536)
            assert data, f"the plugin closed the connection without ending the call; so far {answer}"
            for event in connection.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
                    answer.update(
                        (str(name), str(value))
                        for name, value in event.headers  # decoded to str: header_encoding is set
                    )
                if isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
                    return answer
            writer.write(connection.data_to_send())
    finally:
        writer.close()


def without(name: str) -> list[tuple[str, str]]:
    return [(n, v) for n, v in CALL if n != name]


def replaced(name: str, value: str) -> list[tuple[str, str]]:
    return [(n, value if n == name else v) for n, v in CALL]


REQUEST = message(dra_v1_pb2.NodePrepareResourcesRequest().SerializeToString())
GRPC = {":status": "200", "content-type": "application/grpc+proto"}
"""A gRPC status in a trailers-only answer: Go's gRPC (the kubelet's) reads it only with gRPC's content type."""


@pytest.mark.parametrize(
    ("headers", "body", "expected"),
    [
        (without(":method"), REQUEST, {":status": "405"}),
        (replaced(":method", "GET"), None, {":status": "405"}),
        (without(":path"), REQUEST, {**GRPC, "grpc-status": "12", "grpc-message": "Method not found"}),
        (
            replaced(
                ":path", "/v1.DRAResourceHealth/NodeWatchResources"
            ),  # not served without a health source
            REQUEST,
            {**GRPC, "grpc-status": "12", "grpc-message": "Method not found"},
        ),
        (
            without("content-type"),
            REQUEST,
            {":status": "415", "grpc-status": "2", "grpc-message": "Missing content-type header"},
        ),
        (
            replaced("content-type", "application/json"),
            REQUEST,
            {":status": "415", "grpc-status": "2", "grpc-message": "Unacceptable content-type header"},
        ),
        (without("te"), REQUEST, {":status": "400", "grpc-status": "2"}),
        (
            replaced("grpc-timeout", "soon"),
            REQUEST,
            {**GRPC, "grpc-status": "2", "grpc-message": "Invalid grpc-timeout header"},
        ),
        (
            replaced("grpc-timeout", "123456789S"),  # more than gRPC's 8 digits
            REQUEST,
            {**GRPC, "grpc-status": "2", "grpc-message": "Invalid grpc-timeout header"},
        ),
        (CALL, None, {**GRPC, "grpc-status": "13"}),  # no request message
        (CALL, message(b"\xff\xff\xff"), {**GRPC, "grpc-status": "2"}),  # not a protobuf message
        (CALL, message(b"", compressed=True), {**GRPC, "grpc-status": "12"}),
    ],
    ids=[
        "no-method",
        "GET",
        "no-path",
        "unknown-path",
        "no-content-type",
        "json",
        "no-te",
        "unreadable-timeout",
        "timeout-too-long",
        "no-message",
        "not-protobuf",
        "compressed",
    ],
)
async def test_a_request_no_grpc_client_sends_gets_a_clear_status(
    plugin: KubeletPlugin, headers: list[tuple[str, str]], body: bytes | None, expected: dict[str, str]
) -> None:
    answer = await asyncio.wait_for(raw_call(plugin.dra_socket, headers, body), 10)
    assert {name: answer.get(name) for name in expected} == expected, answer
    async with KubeletClient(plugin.registration_socket) as kubelet:  # and the plugin serves the next call
        await kubelet.register()
        assert (await kubelet.prepare([ClaimRef("team-a", "ok-1", "claim")]))["ok-1"].error == ""


async def test_a_call_the_plugin_answers_carries_the_reply(plugin: KubeletPlugin) -> None:
    answer = await asyncio.wait_for(raw_call(plugin.dra_socket, CALL, prepare_request("ok-1")), 10)
    assert answer == {":status": "200", "content-type": "application/grpc+proto", "grpc-status": "0"}


async def test_bytes_that_are_not_http2_close_that_connection_only(plugin: KubeletPlugin) -> None:
    reader, writer = await asyncio.open_unix_connection(str(plugin.dra_socket))
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"\x00" * 64)
    try:
        while await asyncio.wait_for(reader.read(65536), 10):
            pass  # the server's settings and its GOAWAY, then the end of the connection
    finally:
        writer.close()
    async with KubeletClient(plugin.registration_socket) as kubelet:
        await kubelet.register()
        assert (await kubelet.prepare([ClaimRef("team-a", "ok-2", "claim")]))["ok-2"].error == ""


def prepare_request(uid: str) -> bytes:
    request = dra_v1_pb2.NodePrepareResourcesRequest(
        claims=[dra_v1_pb2.Claim(namespace="team-a", uid=uid, name="claim")]
    )
    return message(request.SerializeToString())


async def test_a_stopping_plugin_refuses_a_call_with_a_status_go_reads(
    plugin: KubeletPlugin, handler: Handler
) -> None:
    held = asyncio.create_task(raw_call(plugin.dra_socket, CALL, prepare_request("held-1")))
    await asyncio.wait_for(handler.held.wait(), 10)
    stopping = asyncio.create_task(plugin.stop())  # waits out its grace for the held call
    refused = await asyncio.wait_for(raw_call(plugin.dra_socket, CALL, prepare_request("ok-3")), 10)
    assert refused == {**GRPC, "grpc-status": "14", "grpc-message": "the kubelet plugin is stopping"}
    handler.release.set()
    assert (await asyncio.wait_for(held, 10))["grpc-status"] == "0"
    await asyncio.wait_for(stopping, 10)
    assert handler.prepared == ["held-1"]
