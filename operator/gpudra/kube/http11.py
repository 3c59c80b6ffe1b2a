"""HTTP/1.1 to one API server over asyncio's streams: a pool of kept-alive connections, bodies sized by
Content-Length or chunked, watches read as their chunks arrive, and the environment's proxy (HTTPS_PROXY,
HTTP_PROXY, NO_PROXY) reached with CONNECT.

This is all of HTTP a KubeClient needs, written for the agent: aiohttp's client, which it replaces for plain
credentials, costs every GPU node's agent 14 MiB of memory. Every failure to reach the server or to read its
answer is raised as an OSError (ConnectionError, or TimeoutError when ``Call.timeout`` runs out).
"""

from __future__ import annotations

import asyncio
import base64
import math
import ssl
import urllib.request
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Protocol, runtime_checkable
from urllib.parse import unquote, urlsplit

HEAD_LIMIT = 64 * 1024
"""Bytes the status line and headers of one answer may take."""


class ProtocolError(ConnectionError):
    """The server's answer is not HTTP/1.1 this client can read; the connection is dropped."""


class _Reader(asyncio.StreamReader):
    """asyncio's stream reader, telling how much it holds that was not read yet."""

    _buffer: bytearray  # asyncio's own, made by StreamReader.__init__

    def buffered(self) -> int:
        return len(self._buffer)


async def _open(
    host: str, port: int, *, limit: int, tls: ssl.SSLContext | None, server_hostname: str | None
) -> tuple[_Reader, asyncio.StreamWriter]:
    """``asyncio.open_connection``, with a :class:`_Reader`."""
    loop = asyncio.get_running_loop()
    reader = _Reader(limit=limit, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    transport, _ = await loop.create_connection(
        lambda: protocol, host, port, ssl=tls, server_hostname=server_hostname
    )
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


@runtime_checkable
class _TLSReading(Protocol):
    """The read flow control of asyncio's TLS transports (``asyncio.sslproto``): how many undecrypted bytes it
    holds before it pauses the connection under it."""

    def get_read_buffer_limits(self) -> tuple[int, int]: ...

    def set_read_buffer_limits(self, high: int | None = None, low: int | None = None) -> None: ...


class _Connection:
    def __init__(self, reader: _Reader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def usable(self) -> bool:
        """Open, and not cut by an answer's deadline (which sets its error on the reader)."""
        return not (self.reader.at_eof() or self.reader.exception() is not None or self.writer.is_closing())

    def close(self) -> None:
        self.writer.close()


class Endpoint:
    """Where requests go: the server's scheme, host and port, its TLS context, and the proxy the environment
    names for it (None: connect directly)."""

    def __init__(self, server: str, tls: ssl.SSLContext | None) -> None:
        url = urlsplit(server)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"an API server URL must be http(s)://host[:port], not {server!r}")
        self.https = url.scheme == "https"
        self.host = url.hostname
        self.port = url.port or (443 if self.https else 80)
        self.base = url.path.rstrip("/")
        self.authority = url.netloc.rpartition("@")[2]
        self.tls = tls if tls is not None or not self.https else ssl.create_default_context()
        proxy = _proxy_for(url.scheme, self.host)
        self.proxy = urlsplit(proxy) if proxy is not None else None

    async def open(self, limit: int) -> _Connection:
        """A new connection: to the server, or through the proxy (a CONNECT tunnel for https)."""
        if self.proxy is None:
            reader, writer = await _open(
                self.host,
                self.port,
                limit=limit,
                tls=self.tls,
                server_hostname=self.host if self.tls else None,
            )
            return _Connection(reader, writer)
        reader, writer = await _open(
            self.proxy.hostname or "", self.proxy.port or 80, limit=limit, tls=None, server_hostname=None
        )
        connection = _Connection(reader, writer)
        try:
            if self.https:
                await self._tunnel(connection)
                assert self.tls is not None  # set for every https endpoint
                await writer.start_tls(self.tls, server_hostname=self.host)
        except BaseException:
            connection.close()
            raise
        return connection

    @property
    def proxy_authorization(self) -> str | None:
        """The Proxy-Authorization header of a proxy URL with a user in it."""
        if self.proxy is None or self.proxy.username is None:
            return None
        user, password = unquote(self.proxy.username), unquote(self.proxy.password or "")
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    async def _tunnel(self, connection: _Connection) -> None:
        target = f"{self.host}:{self.port}"
        head = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
        if self.proxy_authorization is not None:
            head += f"Proxy-Authorization: {self.proxy_authorization}\r\n"
        connection.writer.write((head + "\r\n").encode())
        await connection.writer.drain()
        status, reason, _ = await _read_head(connection.reader)
        if status != 200:
            where = f"{self.proxy.hostname}:{self.proxy.port or 80}" if self.proxy else "?"
            raise ConnectionRefusedError(f"the proxy {where} refused CONNECT {target}: {status} {reason}")


def _proxy_for(scheme: str, host: str) -> str | None:
    """The proxy URL the environment names for ``scheme`` and ``host`` (urllib's reading of *_PROXY and NO_PROXY,
    as aiohttp's trust_env and client-go read them), or None."""
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, str, dict[str, str]]:
    """Status, reason and headers (names lower-cased; a repeated header's last value) of one answer."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        raise ConnectionResetError("the server closed the connection before answering") from exc
    except asyncio.LimitOverrunError as exc:
        raise ProtocolError(f"an answer's headers are longer than {HEAD_LIMIT} bytes") from exc
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise ProtocolError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(code), reason, headers


class Pool:
    """Connections to one endpoint: at most ``limit`` in use at once (every open watch holds one), the idle ones
    kept for the next request."""

    def __init__(self, endpoint: Endpoint, *, limit: int = 100) -> None:
        self.endpoint = endpoint
        self._slots = asyncio.Semaphore(limit)
        self._idle: list[_Connection] = []
        self._closed = False

    async def request(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes | None,
        timeout: float | None,
        *,
        gather: float = 0.0,
    ) -> Response:
        """Send one request and read the answer's head; the body is read from the returned Response, which
        gives its connection back when it is read to the end or left (``async with``). ``gather``: see
        :meth:`Response.chunks`."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        async with asyncio.timeout_at(deadline):
            await self._slots.acquire()
            try:
                return await self._send(method, target, headers, body, deadline, gather)
            except BaseException:
                self._slots.release()
                raise

    async def _send(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes | None,
        deadline: float | None,
        gather: float,
    ) -> Response:
        head = self._head(method, target, headers, body)
        while True:
            reused = bool(self._idle)
            connection = self._idle.pop() if reused else await self.endpoint.open(HEAD_LIMIT)
            if not connection.usable():
                connection.close()
                continue
            try:
                connection.writer.write(head if body is None else head + body)
                await connection.writer.drain()
                status, reason, answer = await _read_head(connection.reader)
            except OSError:
                connection.close()
                if reused:  # the server closed an idle connection as the request left: nothing was done
                    continue
                raise
            except BaseException:
                connection.close()
                raise
            try:
                return Response(
                    self, connection, status, reason, answer, deadline, method == "HEAD", gather=gather
                )
            except ProtocolError:  # an unreadable Content-Length: the connection cannot be read on
                connection.close()
                raise

    def _head(self, method: str, target: str, headers: dict[str, str], body: bytes | None) -> bytes:
        endpoint = self.endpoint
        path = endpoint.base + target
        lines = [f"{method} {path} HTTP/1.1", f"Host: {endpoint.authority}", "User-Agent: gpudra"]
        if (
            endpoint.proxy is not None and not endpoint.https
        ):  # a plain request through the proxy names the server
            lines[0] = f"{method} http://{endpoint.authority}{path} HTTP/1.1"
            if endpoint.proxy_authorization is not None:
                lines.append(f"Proxy-Authorization: {endpoint.proxy_authorization}")
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def give_back(self, connection: _Connection, keep: bool) -> None:
        self._slots.release()
        if keep and not self._closed and connection.usable():
            self._idle.append(connection)
        else:
            connection.close()

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


class Response:
    """One answer: its status and headers, and its body read whole (:meth:`read`) or as it arrives
    (:meth:`chunks`)."""

    def __init__(
        self,
        pool: Pool,
        connection: _Connection,
        status: int,
        reason: str,
        headers: dict[str, str],
        deadline: float | None,
        bodiless: bool,
        *,
        gather: float = 0.0,
    ) -> None:
        self.status = status
        self._gather = gather
        self.gathered = 0
        """How many times reading paused to let a busy stream's chunks gather (``gather``)."""
        self.reason = reason
        self.headers = headers
        self._pool: Pool | None = pool
        self._connection = connection
        self._deadline_timer = (
            None
            if deadline is None
            else asyncio.get_running_loop().call_at(deadline, self._deadline_passed, connection.reader)
        )
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        self._left: int | None = 0 if bodiless or status in (204, 304) or 100 <= status < 200 else None
        if self._left is None and not self._chunked and length is not None:
            if not length.isdigit():
                raise ProtocolError(f"a Content-Length of {length!r}")
            self._left = int(length)
        self._keep = headers.get("connection", "").lower() != "close" and (
            self._chunked or self._left is not None
        )
        self._done = False

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as the server sends it; the connection goes back to the pool once it is read to the end.

        With ``gather`` (a watch's, in seconds), a chunked stream whose chunks come closer together than that is
        read at most that often: once everything read is handed on, reading pauses for ``gather`` seconds and the
        chunks that come meanwhile are read at once. Each read costs the event loop a wake-up, the TLS layer and
        a hand-over through the reader: at 150 claim events a second, about half of a controller's CPU when each
        came alone. A chunk after a quiet spell (longer than ``gather``) is handed on at once."""
        reader = self._connection.reader
        loop = asyncio.get_running_loop()
        last = -math.inf
        try:
            if self._chunked:
                while True:
                    if self._gather and not reader.buffered():  # the next read waits on the socket
                        if loop.time() - last < self._gather:  # as the one before did, a moment ago
                            await self._pause(self._gather)
                        last = loop.time()
                    size_line = await reader.readuntil(b"\r\n")
                    size_text = size_line.split(b";", 1)[0].strip()
                    try:
                        size = int(size_text, 16)
                    except ValueError as exc:
                        raise ProtocolError(f"a chunk size of {size_text[:20]!r}") from exc
                    if size == 0:
                        while await reader.readuntil(b"\r\n") != b"\r\n":
                            pass  # trailers
                        break
                    data = await reader.readexactly(size + 2)
                    yield data[:-2]
            elif self._left is not None:
                while self._left:
                    data = await reader.read(min(self._left, 256 * 1024))
                    if not data:
                        raise ConnectionResetError("the server closed the connection amid an answer")
                    self._left -= len(data)
                    yield data
            else:  # no length: the body ends with the connection
                while data := await reader.read(256 * 1024):
                    yield data
            self._done = True
        except asyncio.IncompleteReadError as exc:
            raise ConnectionResetError("the server closed the connection amid an answer") from exc
        except asyncio.LimitOverrunError as exc:
            raise ProtocolError("a chunk header longer than the read limit") from exc
        finally:
            self.release()

    async def _pause(self, seconds: float) -> None:
        """Read nothing from the connection for ``seconds`` (what comes meanwhile waits in the socket).

        A TLS transport's ``pause_reading`` stops only what it hands up: the connection under it goes on reading
        (the event loop woken for each event) until its buffer of undecrypted bytes passes its high-water mark.
        That mark set to zero for the pause (``set_read_buffer_limits``, asyncio's public flow control for TLS
        transports) pauses the connection under it too."""
        transport = self._connection.writer.transport  # after a proxy's CONNECT, the TLS one over it
        if not isinstance(transport, asyncio.ReadTransport):
            return
        self.gathered += 1
        limits: tuple[int, int] | None = None
        if isinstance(transport, _TLSReading):
            limits = transport.get_read_buffer_limits()
            transport.set_read_buffer_limits(high=0)
        transport.pause_reading()
        try:
            await asyncio.sleep(seconds)
        finally:
            if not transport.is_closing():
                if limits is not None and isinstance(transport, _TLSReading):
                    low, high = limits
                    transport.set_read_buffer_limits(high=high, low=low)
                transport.resume_reading()

    @staticmethod
    def _deadline_passed(reader: asyncio.StreamReader) -> None:
        """The request's deadline: the read waiting on the body, or the next one, raises TimeoutError.

        One timer for the whole answer, not one per read: a watch reads twice for each event, and a timeout
        around every read (a timer scheduled and cancelled each time) was a twelfth of a controller's CPU."""
        reader.set_exception(TimeoutError())  # as asyncio.timeout_at raised it

    def release(self) -> None:
        """Give the connection back: kept for the next request when the body was read to its end, else closed."""
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None
        if self._pool is not None:
            pool, self._pool = self._pool, None
            pool.give_back(self._connection, self._keep and (self._done or self._left == 0))

    async def __aenter__(self) -> Response:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
