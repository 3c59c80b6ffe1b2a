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
import ssl
from collections import Counter
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp

from .identity import ADMIN, TokenIssuer
from .rbac import Policy
from .server import CONFLICTS_PATH, EmbeddedAPIServer
from .servingtls import ServingTLS
from .versions import DEFAULT_MINOR

STOP = "stop"


@dataclass(frozen=True)
class _Options:
    port: int
    kubeconfig: Path
    gates: frozenset[str]
    minor: int
    key: bytes
    rbac: tuple[dict[str, Any], ...]
    tls: ServingTLS | None


async def _serve(options: _Options, conn: Connection) -> None:
    server = EmbeddedAPIServer(
        port=options.port,
        feature_gates=options.gates,
        minor=options.minor,
        tokens=TokenIssuer(options.key),
        policy=Policy(options.rbac),
        tls=options.tls,
    )
    url = await server.start()
    try:
        server.write_kubeconfig(options.kubeconfig)
        conn.send(url)
        await asyncio.to_thread(conn.recv)  # anything, or the parent gone (EOFError), stops it
    except EOFError:
        pass
    finally:
        await server.stop()


def _main(options: _Options, conn: Connection) -> None:
    asyncio.run(_serve(options, conn))


class APIServerProcess:
    """Start with :meth:`start`; the server writes the admin's kubeconfig before it answers with its URL.
    ``tokens``: the issuer whose tokens the server accepts (its key goes to the server's process; None: a new
    one); ``rbac``: the roles and bindings it enforces besides its bootstrap policy; ``tls``: its HTTPS (None:
    plain HTTP)."""

    def __init__(
        self,
        *,
        port: int = 0,
        kubeconfig: Path,
        feature_gates: frozenset[str] = frozenset(),
        minor: int = DEFAULT_MINOR,
        tokens: TokenIssuer | None = None,
        rbac: tuple[dict[str, Any], ...] = (),
        tls: ServingTLS | None = None,
    ) -> None:
        self.tokens = tokens or TokenIssuer()
        self.tls = tls
        self._rbac = rbac
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
            args=(
                _Options(
                    self._port,
                    self._kubeconfig,
                    self._gates,
                    self._minor,
                    self.tokens.key,
                    self._rbac,
                    self.tls,
                ),
                child,
            ),
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
        headers = {"Authorization": f"Bearer {self.tokens.issue(ADMIN)}"}
        async with (
            aiohttp.ClientSession(
                headers=headers,
                connector=aiohttp.TCPConnector(
                    ssl=ssl.create_default_context(cafile=self.tls.ca) if self.tls else True
                ),
            ) as session,
            session.get(self.url + CONFLICTS_PATH) as response,
        ):
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
