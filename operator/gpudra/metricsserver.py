"""The HTTP server of /metrics, /healthz and /readyz: read-only, GET and HEAD, one request per connection.

Written on asyncio's streams rather than aiohttp's web server, which the agent on each GPU node would load for
these three paths alone (1.6 MiB and 14 modules; the agent's API client still uses aiohttp's client). Its callers
are Prometheus and the kubelet's probes: a request line, headers, at most a small body (refused methods may send
one), answered with ``Connection: close``. Anything else (too long, malformed, too slow) gets 400 or 408 or is
dropped; nothing a caller sends reaches the process beyond the path it asks for and the query's parameters, which a
route may read, never act on (docs/security.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import parse_qs

from gpudra.errors import ConfigurationError
from gpudra.telemetry import get_logger

log = get_logger(__name__)

READ_SECONDS = 10.0
"""A caller that has not sent its whole request by then is answered 408 and dropped."""
MAX_HEAD_BYTES = 16 * 1024
"""Request line and headers together."""
MAX_BODY_BYTES = 64 * 1024
"""A body (only refused methods send one) up to this is read before answering, so the answer is not lost to a
reset; a longer one is answered 413."""
MAX_QUERY_FIELDS = 64
"""A query with more parameters is answered 400."""
METHODS = ("GET", "HEAD")
_LENGTH = re.compile(r"[0-9]{1,12}")


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"


Query = Mapping[str, list[str]]
"""A request's query parameters, each name with its values in order."""
Route = Callable[[Query], Answer]
"""What a path answers, given the query's parameters; it reads the process's state, it never changes it."""


class _BadRequest(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


@dataclass
class MetricsServer:
    server: asyncio.Server

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """(host, port) of each socket listened on (IPv6 ones without their flow and scope)."""
        return [(s.getsockname()[0], s.getsockname()[1]) for s in self.server.sockets]

    async def cleanup(self) -> None:
        self.server.close()
        await self.server.wait_closed()


async def serve(routes: Mapping[str, Route], host: str, port: int, *, setting: str) -> MetricsServer:
    """Serve ``routes`` on ``host`` (empty: every address, IPv4 and IPv6) and ``port`` (0: any free one);
    ``setting``: what the user set the port with, named when it cannot be listened on."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                method, target = await asyncio.wait_for(_read_request(reader), READ_SECONDS)
                answer, allow = _route(routes, method, target)
            except _BadRequest as bad:
                method, answer, allow = "GET", _status(bad.status), False
            except TimeoutError:
                method, answer, allow = "GET", _status(HTTPStatus.REQUEST_TIMEOUT), False
            writer.write(_response(answer, head=method == "HEAD", allow=allow))
            await asyncio.wait_for(writer.drain(), READ_SECONDS)
        except (ConnectionError, TimeoutError):
            pass  # the caller went away or stopped reading: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), READ_SECONDS)

    try:
        server = await asyncio.start_server(handle, host or None, port, limit=MAX_HEAD_BYTES)
    except OSError as exc:  # the port taken, an address the node does not have
        where = f"{host or 'every address'}:{port}"
        raise ConfigurationError(f"the metrics server cannot listen on {where} ({setting}): {exc}") from exc
    return MetricsServer(server)


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str]:
    """The method and target (path and query) of the request; its headers and body read and dropped."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError as too_long:
        raise _BadRequest(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE) from too_long
    except asyncio.IncompleteReadError as cut:
        raise ConnectionResetError("the request ended before its headers") from cut
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
        raise _BadRequest(HTTPStatus.BAD_REQUEST)
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            if _LENGTH.fullmatch(value.strip()) is None:  # ASCII digits, few enough for int()
                raise _BadRequest(HTTPStatus.BAD_REQUEST)
            length = int(value.strip())
    if length > MAX_BODY_BYTES:
        raise _BadRequest(HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
    if length:
        await reader.readexactly(length)
    return parts[0], parts[1]


def _route(routes: Mapping[str, Route], method: str, target: str) -> tuple[Answer, bool]:
    """The answer, and whether it is a refused method (then it says which are allowed)."""
    path, _, query = target.partition("?")
    route = routes.get(path)
    if route is None:
        return _status(HTTPStatus.NOT_FOUND), False
    if method not in METHODS:
        return _status(HTTPStatus.METHOD_NOT_ALLOWED), True
    try:
        return route(parse_qs(query, max_num_fields=MAX_QUERY_FIELDS)), False
    except ValueError:  # more query fields than MAX_QUERY_FIELDS
        return _status(HTTPStatus.BAD_REQUEST), False
    except Exception:  # a broken collector: the caller is told, the process goes on
        log.exception("a metrics or health route failed", path=path)
        return _status(HTTPStatus.INTERNAL_SERVER_ERROR), False


def _status(status: int) -> Answer:
    return Answer(status, f"{status}: {HTTPStatus(status).phrase}".encode())


def _response(answer: Answer, *, head: bool, allow: bool) -> bytes:
    lines = [
        f"HTTP/1.1 {answer.status} {HTTPStatus(answer.status).phrase}",
        f"Content-Type: {answer.content_type}",
        f"Content-Length: {len(answer.body)}",
        "Connection: close",
    ]
    if allow:
        lines.append(f"Allow: {', '.join(METHODS)}")
    return "\r\n".join([*lines, "", ""]).encode("latin-1") + (b"" if head else answer.body)
