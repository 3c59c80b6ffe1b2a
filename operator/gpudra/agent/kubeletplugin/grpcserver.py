"""The kubelet plugin's gRPC servers, on grpclib (pure Python, on h2: about 3 MiB where grpcio cost the agent 19).

A servicer's methods are mapped to their gRPC paths by the service's protobuf descriptor (``/<package>.<Service>/
<Method>``), so a path the kubelet may dial is never spelled by hand; a path that maps to nothing is answered
UNIMPLEMENTED by grpclib, as grpcio did. Each method keeps the servicers' ``(request, context)`` form: unary
methods return the reply, server-streaming ones are async generators whose end ends the stream.

grpclib leaves three things to its user that grpcio's server did itself; this module does them:

- **A receive limit.** grpclib buffers whatever length a message's 5-byte prefix announces (up to 4 GiB). A request
  longer than ``MAX_RECEIVE_BYTES`` (grpcio's default, 4 MiB) is refused with RESOURCE_EXHAUSTED from its prefix,
  before its body is read.
- **A graceful stop.** grpclib's ``close()`` cancels every call at once and leaves the connections open (a client
  would keep calling the stopped server). ``stop(grace)`` refuses new calls (UNAVAILABLE), lets the calls in
  flight finish for up to ``grace`` seconds, cancels the rest, and closes every connection, so that a client
  redials the socket's path and finds whichever plugin listens there now.
- Nothing else: the kubelet's deadline (``grpc-timeout``) and its cancellation (RST_STREAM, a lost connection)
  reach the handler as ``asyncio.CancelledError`` through grpclib itself.

Two of grpclib's internals are used, both pinned by ``grpclib<0.5`` and by tests/integration/test_kubelet_plugin.py:
the call's HTTP/2 stream (``Stream._stream``) to read the prefix before the body, and the server's protocol
factory to know its connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from grpclib.const import Cardinality, Handler, Status
from grpclib.encoding.proto import ProtoCodec
from grpclib.exceptions import GRPCError
from grpclib.protocol import H2Protocol
from grpclib.server import Server, Stream

from gpudra.errors import ConfigurationError

log = logging.getLogger(__name__)

MAX_RECEIVE_BYTES = 4 * 1024 * 1024
"""The largest request message accepted: grpcio's default receive limit, which the kubelet's calls never near."""
_PREFIX = struct.Struct(">?I")  # gRPC's length-prefixed message: compressed flag, length

ServerStream = Stream[Message, Message]
UnaryMethod = Callable[[Any, Any], Awaitable[Message]]
StreamingMethod = Callable[[Any, Any], AsyncIterator[Message]]


async def receive(stream: ServerStream, message_type: type[Message]) -> Message:
    """The call's one request message, refused from its length prefix when it is over ``MAX_RECEIVE_BYTES``."""
    h2_stream = (
        stream._stream
    )  # grpclib's own recv_message reads the whole body before anyone sees its length
    prefix = await h2_stream.recv_data(_PREFIX.size)
    if len(prefix) < _PREFIX.size:
        raise GRPCError(Status.INTERNAL, "the call carries no request message")
    compressed, length = _PREFIX.unpack(prefix)
    if compressed:
        raise GRPCError(Status.UNIMPLEMENTED, "compressed messages are not supported")
    if length > MAX_RECEIVE_BYTES:
        raise GRPCError(
            Status.RESOURCE_EXHAUSTED, f"Received message larger than max ({length} vs. {MAX_RECEIVE_BYTES})"
        )
    return message_type.FromString(await h2_stream.recv_data(length))


class _Service:
    """What grpclib's Server serves: a mapping of gRPC paths to handlers."""

    def __init__(self, mapping: Mapping[str, Handler]) -> None:
        self._mapping = dict(mapping)

    def __mapping__(self) -> dict[str, Handler]:
        return self._mapping


class _Server(Server):
    """grpclib's Server, remembering its connections so that a stop can close them."""

    def __init__(self, services: list[_Service]) -> None:
        super().__init__(services, codec=ProtoCodec())
        self.protocols: weakref.WeakSet[H2Protocol] = weakref.WeakSet()

    def _protocol_factory(self) -> H2Protocol:
        protocol = super()._protocol_factory()
        self.protocols.add(protocol)
        return protocol


class PluginServer:
    """One unix socket serving some servicers: ``add`` them, ``start(path)``, ``stop(grace)``."""

    def __init__(self) -> None:
        self._mapping: dict[str, Handler] = {}
        self._server: _Server | None = None
        self._calls: set[asyncio.Task[Any]] = set()
        self._stopping = False

    @property
    def paths(self) -> list[str]:
        """The gRPC paths served."""
        return sorted(self._mapping)

    def add(self, service: ServiceDescriptor, servicer: object) -> None:
        """Serve every method of ``service`` by the servicer's method of the same name."""
        for method in service.methods:
            path = f"/{service.full_name}/{method.name}"
            self._mapping[path] = self._handler(method, getattr(servicer, method.name))

    async def start(self, path: Path) -> None:
        self._stopping = False
        server = _Server([_Service(self._mapping)])
        try:
            await server.start(path=str(path))
        except OSError as exc:
            raise ConfigurationError(f"cannot listen on {path}: {exc}") from exc
        self._server = server

    async def stop(self, grace: float) -> None:
        """Refuse new calls, give those in flight ``grace`` seconds, cancel the rest, close every connection."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping = True
        if self._calls and grace > 0:
            await asyncio.wait(set(self._calls), timeout=grace)
        server.close()  # stops listening and cancels the calls still running
        for protocol in list(server.protocols):
            processor = getattr(protocol, "processor", None)  # set once the connection is made
            if processor is not None:
                processor.close("the kubelet plugin stopped")
        await server.wait_closed()

    def _handler(self, method: MethodDescriptor, func: Any) -> Handler:
        if method.client_streaming:
            raise ConfigurationError(f"{method.full_name}: client-streaming methods are not served")
        request_type = GetMessageClass(method.input_type)
        reply_type = GetMessageClass(method.output_type)
        if method.server_streaming:
            cardinality = Cardinality.UNARY_STREAM

            async def serve(stream: ServerStream) -> None:
                request = await receive(stream, request_type)
                async with contextlib.aclosing(func(request, stream)) as replies:
                    async for reply in replies:
                        await stream.send_message(reply)
        else:
            cardinality = Cardinality.UNARY_UNARY

            async def serve(stream: ServerStream) -> None:
                request = await receive(stream, request_type)
                await stream.send_message(await func(request, stream))

        return Handler(self._tracked(serve), cardinality, request_type, reply_type)

    def _tracked(
        self, serve: Callable[[ServerStream], Awaitable[None]]
    ) -> Callable[[ServerStream], Awaitable[None]]:
        """A call counted in flight while it runs, refused once the server is stopping."""

        async def call(stream: ServerStream) -> None:
            if self._stopping:
                raise GRPCError(Status.UNAVAILABLE, "the kubelet plugin is stopping")
            task = asyncio.current_task()
            assert task is not None  # grpclib runs each call in a task of its own
            self._calls.add(task)
            try:
                await serve(stream)
            finally:
                self._calls.discard(task)

        return call
