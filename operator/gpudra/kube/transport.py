"""How KubeClient's requests reach an API server: the ``Transport`` protocol.

A transport answers a request with a ``Reply``: its status, and its body either read whole or, for a watch, as
chunks while they arrive. There are three: plain credentials over HTTP/1.1 on asyncio's streams
(:mod:`gpudra.kube.session`), kubernetes_asyncio's client for kubeconfigs that need its loaders and for the
embedded cluster's loopback URL (:mod:`gpudra.kube.apitransport`), and the embedded cluster's in-process one
(``gpudra.cluster.apiserver.local``), which hands requests to its API server without HTTP. Each raises OSError
(TimeoutError included) when the server cannot be reached or the connection breaks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

WATCH_READ_BUFFER = 2 * 1024 * 1024
"""Bytes one watch event may take (kubernetes_asyncio's own setting: etcd admits objects up to 1.5 MiB)."""


@dataclass(frozen=True, slots=True)
class Call:
    """One request: ``body`` is JSON-serializable, or None."""

    method: str
    path: str
    query: list[tuple[str, str]]
    headers: dict[str, str]
    body: Any = None
    timeout: float | None = None
    gather: float = 0.0
    """For a watch: when its chunks come closer together than this (seconds), read the stream at most this often,
    so that each read takes several (the HTTP/1.1 transport; the others read as chunks come)."""

    @property
    def watch(self) -> bool:
        """Whether the answer streams (a watch) instead of coming whole."""
        return (
            any(k == "watch" and v in ("true", "True", "1") for k, v in self.query) or "/watch/" in self.path
        )


class Reply(Protocol):
    """An API server's answer to one request, closed when its body is read or the watch is left."""

    @property
    def status(self) -> int: ...

    @property
    def reason(self) -> str: ...

    async def read(self) -> bytes:
        """The whole body."""
        ...

    def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives (a watch stream), until the server ends it."""
        ...

    async def __aenter__(self) -> Reply: ...

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class Transport(Protocol):
    async def request(self, call: Call) -> Reply:
        """The server's reply to ``call``, whatever its status; a server that cannot be reached, or a connection
        that breaks while the reply is read, raises OSError (TimeoutError included)."""
        ...

    async def close(self) -> None: ...
