"""The kubelet plugin's gRPC servers, on grpclib's HTTP/2 protocol (pure Python, on h2: about 3 MiB where grpcio
cost the agent 19).

A servicer's methods are mapped to their gRPC paths by the service's protobuf descriptor (``/<package>.<Service>/
<Method>``), so a path the kubelet may dial is never spelled by hand; a path that maps to nothing is answered
UNIMPLEMENTED, as grpcio did. Each method keeps the servicers' ``(request, context)`` form (the context is None):
unary methods return the reply, server-streaming ones are async generators whose end ends the stream. Each call is
answered by ``grpccalls``: the receive limit, the kubelet's deadline and cancellation, errors as gRPC statuses.

The server listens with asyncio's unix server and grpclib's ``H2Protocol``, with the HTTP/2 settings grpclib's
own server uses, built once: its ``Configuration`` for servers, and h2's validation and normalization of headers
off, as grpclib sets them. That leaves a peer's headers unchecked by h2 (a pure-Python pass over every header of
every call); the socket is a root-only unix socket that only the kubelet dials, and the plugin reads only the
headers a call needs, refusing a request without them with a clear status
(tests/integration/test_kubelet_plugin_wire.py).

The stop is graceful, which grpclib's server's ``close()`` is not (it cancels every call at once and leaves the
connections open, so a client would keep calling the stopped server): ``stop(grace)`` refuses new calls
(UNAVAILABLE), lets the calls in flight finish for up to ``grace`` seconds, cancels the rest, and closes every
connection, so that a client redials the socket's path and finds whichever plugin listens there now.

grpclib's internals used, pinned by ``grpclib<0.5`` and by tests/integration/test_kubelet_plugin.py: the protocol
(``H2Protocol`` and the ``AbstractHandler`` it hands calls to), its connections' processor (to close them), and
its HTTP/2 stream (``grpclib.protocol.Stream``).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import h2.config
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message_factory import GetMessageClass
from grpclib.config import Configuration
from grpclib.protocol import H2Protocol
from grpclib.protocol import Stream as H2Stream

from gpudra.agent.kubeletplugin.grpccalls import Calls, Headers, Method, serve_call
from gpudra.errors import ConfigurationError

_H2_CONFIG = h2.config.H2Configuration(
    client_side=False,
    header_encoding="ascii",
    validate_inbound_headers=False,
    validate_outbound_headers=False,
    normalize_inbound_headers=False,
    normalize_outbound_headers=False,
)
_CONFIG = Configuration().__for_server__()


class PluginServer:
    """One unix socket serving some servicers: ``add`` them, ``start(path)``, ``stop(grace)``."""

    def __init__(self) -> None:
        self._methods: dict[str, Method] = {}
        self._server: asyncio.Server | None = None
        self._protocols: weakref.WeakSet[H2Protocol] = weakref.WeakSet()
        self._connections: weakref.WeakSet[Calls] = weakref.WeakSet()
        self._stopping = False

    @property
    def paths(self) -> list[str]:
        """The gRPC paths served."""
        return sorted(self._methods)

    def add(self, service: ServiceDescriptor, servicer: object) -> None:
        """Serve every method of ``service`` by the servicer's method of the same name."""
        for method in service.methods:
            path = f"/{service.full_name}/{method.name}"
            self._methods[path] = _method(method, getattr(servicer, method.name))

    async def start(self, path: Path) -> None:
        self._stopping = False
        serve = partial(serve_call, methods=self._methods, refuse=self._refusal)
        try:
            server = await asyncio.get_running_loop().create_unix_server(
                partial(self._protocol, serve), str(path), backlog=100
            )
        except OSError as exc:
            raise ConfigurationError(f"cannot listen on {path}: {exc}") from exc
        self._server = server

    async def stop(self, grace: float) -> None:
        """Refuse new calls, give those in flight ``grace`` seconds, cancel the rest, close every connection."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping = True
        running = self._running()
        if running and grace > 0:
            await asyncio.wait(running, timeout=grace)
        server.close()  # stops listening
        for calls in list(self._connections):
            calls.close()
        for protocol in list(self._protocols):
            processor = getattr(protocol, "processor", None)  # set once the connection is made
            if processor is not None:
                processor.close("the kubelet plugin stopped")
        running = self._running()
        if running:
            await asyncio.wait(running)
        await server.wait_closed()

    def _protocol(self, serve: Callable[[H2Stream, Headers], Awaitable[None]]) -> H2Protocol:
        calls = Calls(serve)
        protocol = H2Protocol(calls, _CONFIG, _H2_CONFIG)
        self._connections.add(calls)
        self._protocols.add(protocol)
        return protocol

    def _running(self) -> set[asyncio.Task[None]]:
        return {task for calls in self._connections for task in calls.running.values()}

    def _refusal(self) -> str | None:
        return "the kubelet plugin is stopping" if self._stopping else None


def _method(method: MethodDescriptor, func: Any) -> Method:
    if method.client_streaming:
        raise ConfigurationError(f"{method.full_name}: client-streaming methods are not served")
    return Method(
        GetMessageClass(method.input_type), GetMessageClass(method.output_type), func, method.server_streaming
    )
