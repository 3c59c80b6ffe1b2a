"""The agent's HTTP/1.1 client (gpudra.kube.http11) against small servers that answer as kube-apiserver's Go
server does: bodies by Content-Length and chunked watches, kept-alive connections reused, an idle connection
the server closed replaced without the caller noticing, a deadline, and the environment's proxy."""

from __future__ import annotations

import asyncio
import itertools
import json
import ssl
from asyncio import sslproto
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from gpudra.cluster.apiserver.servingtls import new_serving_tls
from gpudra.errors import KubeConnectionError
from gpudra.kube.client import KubeClient
from gpudra.kube.http11 import Endpoint, Pool
from gpudra.kube.kubeconfig import Credentials
from gpudra.kube.resources import NODES
from gpudra.kube.session import SessionTransport
from gpudra.testing import eventually

pytestmark = pytest.mark.timeout(30)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, str], Awaitable[bool]]
"""Answers one request (its request line given); False closes the connection after it."""


class Server:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[str] = []
        self.port = 0
        self.serving: set[asyncio.Task[None]] = set()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self.serving.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
                if "Content-Length" in headers:
                    await reader.readexactly(int(headers["Content-Length"]))
                self.requests.append(lines[0])
                if not await self.handler(reader, writer, lines[0]):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            self.serving.discard(task)


@asynccontextmanager
async def serving(handler: Handler, tls: ssl.SSLContext | None = None) -> AsyncIterator[Server]:
    server = Server(handler)
    listener = await asyncio.start_server(server.serve, "127.0.0.1", 0, ssl=tls)
    server.port = listener.sockets[0].getsockname()[1]
    async with listener:
        try:
            yield server
        finally:
            # a handler that never answers must end with the test: from Python 3.12 the listener's close waits
            # for every connection it accepted
            for task in list(server.serving):
                task.cancel()
            await asyncio.gather(*server.serving, return_exceptions=True)


def answer(body: dict[str, object]) -> bytes:
    data = json.dumps(body).encode()
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    return head.encode() + data


def node(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "resourceVersion": "5"}}


def client(port: int) -> KubeClient:
    return KubeClient(SessionTransport(Credentials(server=f"http://127.0.0.1:{port}", token="t")))


async def test_requests_share_one_kept_alive_connection() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, line: str) -> bool:
        writer.write(answer(node("n1")))
        return True

    async with serving(handler) as server:
        kube = client(server.port)
        for _ in range(3):
            assert (await kube.get_raw(NODES, "n1"))["metadata"]["name"] == "n1"
        await kube.close()
    assert server.connections == 1 and len(server.requests) == 3


async def test_an_idle_connection_the_server_closed_is_replaced_unnoticed() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, line: str) -> bool:
        writer.write(answer(node("n1")))
        await writer.drain()
        return False  # closes after each answer, without saying so, as a server's idle timeout does

    async with serving(handler) as server:
        kube = client(server.port)
        for _ in range(3):
            assert (await kube.get_raw(NODES, "n1"))["metadata"]["name"] == "n1"
        await kube.close()
    assert server.connections == 3


async def test_a_chunked_watch_is_read_event_by_event_as_it_arrives() -> None:
    sent = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, line: str) -> bool:
        if "watch=true" not in line:
            writer.write(answer(node("n1")))
            return True
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        for i in range(3):
            event = json.dumps({"type": "ADDED", "object": node(f"n{i}")}).encode() + b"\n"
            half = len(event) // 2  # an event split over two chunks
            for part in (event[:half], event[half:]):
                writer.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            await writer.drain()
            if i == 1:
                await sent.wait()  # the client must have seen two events before the third is sent
        writer.write(b"0\r\n\r\n")
        return True

    async with serving(handler) as server:
        kube = client(server.port)
        names = []
        async for _kind, obj in kube.watch(NODES):
            names.append(obj["metadata"]["name"])
            if len(names) == 2:
                sent.set()
        assert names == ["n0", "n1", "n2"]
        got = await kube.get_raw(NODES, "n1")  # on the same connection: the watch was read to its end
        assert got["metadata"]["name"] == "n1"
        await kube.close()
    assert server.connections == 1


async def test_an_answer_cut_short_is_a_lost_connection_not_a_crash() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, line: str) -> bool:
        writer.write(answer(node("n1"))[:-5])
        return False

    async with serving(handler) as server:
        kube = client(server.port)
        with pytest.raises(KubeConnectionError, match="connection failed"):
            await kube.get_raw(NODES, "n1")
        await kube.close()


async def test_the_deadline_covers_a_server_that_never_answers() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, line: str) -> bool:
        await asyncio.Event().wait()
        return False

    async with serving(handler) as server:
        pool = Pool(Endpoint(f"http://127.0.0.1:{server.port}", None))
        with pytest.raises(TimeoutError):
            await pool.request("GET", "/api/v1/nodes", {}, None, 0.2)
        await pool.close()


async def test_the_environments_proxy_is_used_unless_no_proxy_names_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, line: str) -> bool:
        writer.write(answer(node("via-proxy")))
        return True

    async with serving(handler) as proxy:
        monkeypatch.setenv("HTTP_PROXY", f"http://user:pw@127.0.0.1:{proxy.port}")
        monkeypatch.setenv("NO_PROXY", "")
        kube = KubeClient(SessionTransport(Credentials(server="http://apiserver.example:6443", token="t")))
        assert (await kube.get_raw(NODES, "n1"))["metadata"]["name"] == "via-proxy"
        await kube.close()
        assert proxy.requests == ["GET http://apiserver.example:6443/api/v1/nodes/n1 HTTP/1.1"]
        monkeypatch.setenv("NO_PROXY", "apiserver.example")
        assert Endpoint("http://apiserver.example:6443", None).proxy is None


def watch_head() -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def test_a_watch_that_falls_silent_ends_at_its_deadline() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, line: str) -> bool:
        writer.write(watch_head() + chunk(b'{"type": "ADDED"}\n'))
        await writer.drain()
        await asyncio.Event().wait()  # then nothing, the connection left open
        return False

    async with serving(handler) as server:
        pool = Pool(Endpoint(f"http://127.0.0.1:{server.port}", None))
        loop = asyncio.get_running_loop()
        started = loop.time()
        response = await pool.request("GET", "/api/v1/nodes?watch=true", {}, None, 0.5)
        chunks = response.chunks()
        assert await anext(chunks) == b'{"type": "ADDED"}\n'
        with pytest.raises(TimeoutError):
            await anext(chunks)
        assert 0.5 <= loop.time() - started < 2
        await pool.close()


async def test_a_connection_kept_after_an_answer_outlives_that_answers_deadline() -> None:
    past = asyncio.Event()  # the first request's deadline has passed

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, line: str) -> bool:
        if "watch=true" not in line:
            writer.write(answer(node("n1")))
            return True
        writer.write(watch_head())
        await writer.drain()
        await past.wait()  # the event comes after the first request's deadline, on the same connection
        writer.write(chunk(b'{"type": "ADDED"}\n') + b"0\r\n\r\n")
        return True

    async with serving(handler) as server:
        pool = Pool(Endpoint(f"http://127.0.0.1:{server.port}", None))
        loop = asyncio.get_running_loop()
        first_deadline = loop.time() + 0.2
        async with await pool.request("GET", "/api/v1/nodes/n1", {}, None, 0.2) as first:
            assert json.loads(await first.read())["metadata"]["name"] == "n1"
        watch = await pool.request("GET", "/api/v1/nodes?watch=true", {}, None, 5)
        await eventually(lambda: loop.time() > first_deadline + 0.1, what="the first deadline passed")
        past.set()
        assert [data async for data in watch.chunks()] == [b'{"type": "ADDED"}\n']
        await pool.close()
    assert server.connections == 1


async def test_a_connection_whose_answers_deadline_passed_is_not_reused_for_the_next_request() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, line: str) -> bool:
        writer.write(answer(node("n1")))
        return True

    async with serving(handler) as server:
        pool = Pool(Endpoint(f"http://127.0.0.1:{server.port}", None))
        async with await pool.request("POST", "/api/v1/nodes", {}, b"{}", 0.2) as first:
            chunks = first.chunks()
            assert json.loads(await anext(chunks))["metadata"]["name"] == "n1"  # the whole body, not its end
            # held until its deadline has cut the connection's reader, then left
            await eventually(lambda: first._connection.reader.exception(), what="the answer's deadline")
        async with await pool.request("POST", "/api/v1/nodes", {}, b"{}", 5) as second:
            assert json.loads(await second.read())["metadata"]["name"] == "n1"
        await pool.close()
    assert server.requests == ["POST /api/v1/nodes HTTP/1.1"] * 2  # the second was sent once


def paced_watch(events: int, spell: float) -> Handler:
    """A watch that sends ``events`` events, one chunk each, ``spell`` seconds apart (the first after one too)."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, line: str) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i in range(events):
            await asyncio.sleep(spell)  # the producer's pace: what the test is about
            event = json.dumps({"type": "ADDED", "object": node(f"n{i}")}).encode() + b"\n"
            writer.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        return True

    return handler


async def _read_watch(
    port: int, gather: float, tls: ssl.SSLContext | None = None
) -> tuple[list[tuple[float, str]], int]:
    """Each chunk's arrival (the loop's time) and event name, and how often reading paused."""
    pool = Pool(Endpoint(f"{'https' if tls else 'http'}://127.0.0.1:{port}", tls))
    loop = asyncio.get_running_loop()
    response = await pool.request("GET", "/api/v1/nodes?watch=true", {}, None, 30, gather=gather)
    seen = [(loop.time(), json.loads(c)["object"]["metadata"]["name"]) async for c in response.chunks()]
    await pool.close()
    return seen, response.gathered


async def test_a_busy_watch_is_read_at_most_once_a_gather_period_and_nothing_is_lost() -> None:
    async with serving(paced_watch(40, 0.005)) as server:
        seen, paused = await _read_watch(server.port, gather=0.1)
    assert [name for _, name in seen] == [f"n{i}" for i in range(40)]
    reads = 1 + sum(1 for (before, _), (after, _) in itertools.pairwise(seen) if after - before > 0.002)
    spread = seen[-1][0] - seen[0][0]
    assert paused >= 1 and reads <= spread / 0.1 + 2, (reads, spread)


async def test_a_watch_whose_events_come_apart_is_read_as_each_comes() -> None:
    async with serving(paced_watch(3, 0.15)) as server:  # a quiet spell longer than the gather period
        seen, paused = await _read_watch(server.port, gather=0.1)
    assert [name for _, name in seen] == ["n0", "n1", "n2"]
    assert paused == 0


async def test_a_busy_watch_over_tls_is_read_from_the_socket_once_a_gather_period(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over TLS (every API server), pausing what the TLS layer hands up is not enough: the connection under it
    would still be read, the event loop woken, for each event. The socket itself is read at most once a gather
    period too."""
    served = new_serving_tls(tmp_path)
    client_tls = ssl.create_default_context(cafile=str(served.ca))
    received = 0
    handed = sslproto.SSLProtocol.buffer_updated

    def counted(protocol: sslproto.SSLProtocol, nbytes: int) -> None:
        nonlocal received
        received += 1
        handed(protocol, nbytes)

    async with serving(paced_watch(40, 0.005), tls=served.context()) as server:
        monkeypatch.setattr(sslproto.SSLProtocol, "buffer_updated", counted)
        seen, paused = await _read_watch(server.port, gather=0.1, tls=client_tls)
    assert [name for _, name in seen] == [f"n{i}" for i in range(40)]
    spread = seen[-1][0] - seen[0][0]
    assert paused >= 1 and received <= spread / 0.1 + 8, (received, spread)  # + the handshake and head
