"""One gRPC call of the kubelet plugin's servers, from the HTTP/2 stream grpclib's protocol hands over to its answer.

grpclib's own server layer (``grpclib.server``: its ``Handler``, ``request_handler`` and ``Stream``) builds, for
every call, a metadata multidict, a deadline object and context manager, a peer object, event dispatches for
listeners the plugin never registers, and checks of metadata the plugin never sends; about a sixth of a bare call's
CPU in the agent's process (docs/performance.md). This module answers a call with what the kubelet's calls need,
on grpclib's HTTP/2 protocol (``grpclib.protocol``: its ``H2Protocol`` and stream), with grpclib's statuses and
messages:

- a request that is not a gRPC call is refused as grpclib refused it: a method other than POST with HTTP 405, a
  missing or other content type than ``application/grpc`` (``+proto``) with 415, no ``te: trailers`` with 400; an
  unknown path with UNIMPLEMENTED, an unreadable ``grpc-timeout`` with UNKNOWN ("Invalid grpc-timeout header"),
  each a trailers-only answer with gRPC's content type (grpclib left it out there, and Go's gRPC then reads the
  status as UNKNOWN);
- the kubelet's deadline (``grpc-timeout``) cancels the handler and is answered DEADLINE_EXCEEDED; the kubelet's
  cancellation (RST_STREAM, a lost connection) cancels the handler (``Calls.cancel``, ``Calls.close``);
- a ``GRPCError`` raised by the handler is answered with its status and message, any other exception with UNKNOWN
  ("Internal Server Error") and its traceback in the log;
- a request longer than ``MAX_RECEIVE_BYTES`` is refused with RESOURCE_EXHAUSTED from its length prefix, before its
  body is read (grpclib buffers whatever a prefix announces).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.metadata import encode_grpc_message
from grpclib.protocol import AbstractHandler
from grpclib.protocol import Stream as H2Stream
from h2.exceptions import StreamClosedError

log = logging.getLogger(__name__)

MAX_RECEIVE_BYTES = 4 * 1024 * 1024
"""The largest request message accepted: grpcio's default receive limit, which the kubelet's calls never near."""
_PREFIX = struct.Struct(">?I")  # gRPC's length-prefixed message: compressed flag, length
_CONTENT_TYPE = "application/grpc+proto"
_INITIAL = [(":status", "200"), ("content-type", _CONTENT_TYPE)]
_OK = [("grpc-status", "0")]
_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}

Headers = list[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class Method:
    """A served gRPC method: its request's type and the servicer's function (a coroutine, or for a server-
    streaming method an async generator), called ``(request, None)``."""

    request_type: type[Message]
    reply_type: type[Message]
    func: Any
    streaming: bool


def timeout_seconds(value: str) -> float:
    """A ``grpc-timeout`` header's seconds: up to 8 digits and a unit (H, M, S, m, u, n)."""
    unit = _TIMEOUT_UNITS.get(value[-1:])
    digits = value[:-1]
    if unit is None or not (0 < len(digits) <= 8) or not digits.isascii() or not digits.isdigit():
        raise ValueError(f"invalid grpc-timeout {value!r}")
    return int(digits) * unit


class Calls(AbstractHandler):
    """What grpclib's HTTP/2 protocol hands one connection's calls to: a task for each call."""

    def __init__(self, serve: Callable[[H2Stream, Headers], Awaitable[None]]) -> None:
        self._serve = serve
        self._loop = asyncio.get_running_loop()
        self.running: dict[H2Stream, asyncio.Task[None]] = {}

    def accept(self, stream: H2Stream, headers: Headers, release_stream: Callable[[], Any]) -> None:
        self.running[stream] = self._loop.create_task(self._run(stream, headers, release_stream))

    async def _run(self, stream: H2Stream, headers: Headers, release_stream: Callable[[], Any]) -> None:
        try:
            await self._serve(stream, headers)
        finally:
            self.running.pop(stream, None)
            release_stream()

    def cancel(self, stream: H2Stream) -> None:
        """The peer reset the call's stream."""
        task = self.running.get(stream)
        if task is not None:
            task.cancel()

    def close(self) -> None:
        """The connection is gone."""
        for task in self.running.values():
            task.cancel()


async def serve_call(
    stream: H2Stream, headers: Headers, methods: dict[str, Method], refuse: Callable[[], str | None]
) -> None:
    """Answer one call; ``refuse`` says why new calls are refused (UNAVAILABLE), or None."""
    http_method = path = content_type = te = timeout = None
    for name, value in headers:
        if name == ":path":
            path = value
        elif name == ":method":
            http_method = value
        elif name == "content-type":
            content_type = value
        elif name == "te":
            te = value
        elif name == "grpc-timeout":
            timeout = value
    if http_method != "POST":
        return await _abort(stream, 405)
    if content_type is None:
        return await _abort(stream, 415, Status.UNKNOWN, "Missing content-type header")
    if content_type not in ("application/grpc", _CONTENT_TYPE):
        return await _abort(stream, 415, Status.UNKNOWN, "Unacceptable content-type header")
    if te != "trailers":
        return await _abort(stream, 400, Status.UNKNOWN, 'Required "te: trailers" header is missing')
    method = methods.get(path or "")
    if method is None:
        return await _end(stream, False, Status.UNIMPLEMENTED, "Method not found")
    seconds = None
    if timeout is not None:
        try:
            seconds = timeout_seconds(timeout)
        except ValueError:
            return await _end(stream, False, Status.UNKNOWN, "Invalid grpc-timeout header")
    refused = refuse()
    if refused is not None:
        return await _end(stream, False, Status.UNAVAILABLE, refused)
    answered = [False]  # whether the initial headers went out: the trailers then carry the status alone
    try:
        if seconds is None:
            await _answer(stream, method, answered)
        else:
            deadline = asyncio.timeout(seconds)
            try:
                async with deadline:
                    await _answer(stream, method, answered)
            except TimeoutError:
                if not deadline.expired():
                    raise
                log.info("deadline exceeded: %s", path)
                raise GRPCError(Status.DEADLINE_EXCEEDED) from None
    except GRPCError as exc:
        await _end(stream, answered[0], exc.status, exc.message)
    except StreamClosedError:
        pass  # the peer is gone: nobody to answer
    except Exception:
        log.exception("the kubelet plugin's %s failed", path)
        await _end(stream, answered[0], Status.UNKNOWN, "Internal Server Error")


async def receive(stream: H2Stream, message_type: type[Message]) -> Message:
    """The call's one request message, refused from its length prefix when it is over ``MAX_RECEIVE_BYTES``."""
    prefix = await stream.recv_data(_PREFIX.size)
    if len(prefix) < _PREFIX.size:
        raise GRPCError(Status.INTERNAL, "the call carries no request message")
    compressed, length = _PREFIX.unpack(prefix)
    if compressed:
        raise GRPCError(Status.UNIMPLEMENTED, "compressed messages are not supported")
    if length > MAX_RECEIVE_BYTES:
        raise GRPCError(
            Status.RESOURCE_EXHAUSTED, f"Received message larger than max ({length} vs. {MAX_RECEIVE_BYTES})"
        )
    return message_type.FromString(await stream.recv_data(length))


def _framed(message: Message, reply_type: type[Message]) -> bytes:
    if not isinstance(message, reply_type):
        raise TypeError(f"a reply must be {reply_type.__name__}, not {type(message).__name__}")
    body = message.SerializeToString()
    return _PREFIX.pack(False, len(body)) + body


async def _answer(stream: H2Stream, method: Method, answered: list[bool]) -> None:
    request = await receive(stream, method.request_type)
    if not method.streaming:
        await _send(stream, _framed(await method.func(request, None), method.reply_type), answered)
        await stream.send_headers(_OK, end_stream=True)
        return
    replies = method.func(request, None)
    try:
        async for reply in replies:
            await _send(stream, _framed(reply, method.reply_type), answered)
    finally:
        await replies.aclose()
    await _end(stream, answered[0], Status.OK, None)


async def _send(stream: H2Stream, data: bytes, answered: list[bool]) -> None:
    """One message, after the initial headers when it is the first."""
    if not answered[0]:
        await stream.send_headers(_INITIAL)
        answered[0] = True
    await stream.send_data(data)


async def _end(stream: H2Stream, answered: bool, status: Status, message: str | None) -> None:
    """The call's trailers, and a reset of a failed call's stream so that the peer stops sending. When no headers
    went out yet, a trailers-only answer: with HTTP status 200 and gRPC's content type, which Go's gRPC (the
    kubelet's) requires to read the status at all (without it a call reads UNKNOWN, "missing content-type")."""
    if stream._transport.is_closing():
        return
    await _last_headers(
        stream, [] if answered else list(_INITIAL), status, message, reset=status is not Status.OK
    )


async def _abort(
    stream: H2Stream, http_status: int, status: Status | None = None, message: str | None = None
) -> None:
    """A request that is no gRPC call: refused with an HTTP status (and a gRPC one, when given)."""
    await _last_headers(stream, [(":status", str(http_status))], status, message, reset=True)


async def _last_headers(
    stream: H2Stream,
    headers: list[tuple[str, str]],
    status: Status | None,
    message: str | None,
    *,
    reset: bool,
) -> None:
    """``headers`` with the gRPC status and message, ending the stream; then, with ``reset``, a reset of the
    stream so that the peer stops sending."""
    if status is not None:
        headers.append(("grpc-status", str(status.value)))
    if message is not None:
        headers.append(("grpc-message", encode_grpc_message(message)))
    try:
        await stream.send_headers(headers, end_stream=True)
    except StreamClosedError:
        return
    if reset and stream.closable:
        stream.reset_nowait()
