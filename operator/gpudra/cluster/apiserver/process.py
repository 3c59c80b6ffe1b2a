"""The embedded API server in a process of its own.

In one process the API server, the simulated nodes and the controller share one core (the GIL); in a real
cluster the API server is a process of its own. ``gpudra up --api-server-process`` runs it so: the server's work
(request decoding, storage, watch fan-out) goes to another core, and every client reaches it over HTTP. Since
the nodes and stand-ins call an in-process server without HTTP (local.py), one process is the faster default.
Tests keep the in-process server, whose objects they inspect directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path

import aiohttp

from .server import CONFLICTS_PATH, EmbeddedAPIServer
from .versions import DEFAULT_MINOR

STOP = "stop"


async def _serve(port: int, kubeconfig: Path, gates: frozenset[str], minor: int, conn: Connection) -> None:
    server = EmbeddedAPIServer(port=port, feature_gates=gates, minor=minor)
    url = await server.start()
    try:
        server.write_kubeconfig(kubeconfig)
        conn.send(url)
        await asyncio.to_thread(conn.recv)  # anything, or the parent gone (EOFError), stops it
    except EOFError:
        pass
    finally:
        await server.stop()


def _main(port: int, kubeconfig: Path, gates: frozenset[str], minor: int, conn: Connection) -> None:
    asyncio.run(_serve(port, kubeconfig, gates, minor, conn))


class APIServerProcess:
    """Start with :meth:`start`; the server writes the kubeconfig before it answers with its URL."""

    def __init__(
        self,
        *,
        port: int = 0,
        kubeconfig: Path,
        feature_gates: frozenset[str] = frozenset(),
        minor: int = DEFAULT_MINOR,
    ) -> None:
        self._port = port
        self._minor = minor
        self._kubeconfig = kubeconfig
        self._gates = feature_gates
        self._conn: Connection | None = None
        self._process: multiprocessing.process.BaseProcess | None = None
        self.url = ""

    async def start(self, timeout: float = 60.0) -> str:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        self._process = context.Process(
            target=_main,
            args=(self._port, self._kubeconfig, self._gates, self._minor, child),
            name="gpudra-apiserver",
            daemon=True,
        )
        self._process.start()
        child.close()
        self._conn = parent
        if not await asyncio.to_thread(parent.poll, timeout):
            await self.stop()
            raise TimeoutError(f"the API server process did not start within {timeout:.0f}s")
        try:
            self.url = str(parent.recv())
        except EOFError:  # it ended before it served (its error is on stderr)
            code = self._process.exitcode
            await self.stop()
            raise RuntimeError(f"the API server process exited before it served (exit code {code})") from None
        return self.url

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def conflicts_by_resource(self) -> Counter[str]:
        async with aiohttp.ClientSession() as session, session.get(self.url + CONFLICTS_PATH) as response:
            response.raise_for_status()
            return Counter(await response.json())

    async def stop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError):  # the server already gone
                self._conn.send(STOP)
            self._conn.close()
            self._conn = None
        if self._process is not None:
            await asyncio.to_thread(self._process.join, 10)
            if self._process.is_alive():
                self._process.terminate()
            self._process = None
