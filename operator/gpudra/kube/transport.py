"""How KubeClient's requests reach an API server: the ``Transport`` protocol, and the HTTP one over
kubernetes_asyncio's connection pool (credentials, TLS, kubeconfig) for what :mod:`gpudra.kube.session` does not
cover (kubeconfig plugins, the embedded cluster's loopback URL).

A transport answers a request with a ``Reply``: its status, and its body either read whole or, for a watch, as
chunks while they arrive. The embedded cluster has a second transport (``gpudra.cluster.apiserver.local``) that
hands requests to its in-process API server without HTTP.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp

if (
    TYPE_CHECKING
):  # imported where a transport is built: importing it loads every generated model (session.py)
    from kubernetes_asyncio import client as k8s_client

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
        """The server's reply to ``call``, whatever its status; a server that cannot be reached raises OSError,
        TimeoutError or aiohttp.ClientError."""
        ...

    async def close(self) -> None: ...


class HTTPReply:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    @property
    def status(self) -> int:
        return int(self._response.status)

    @property
    def reason(self) -> str:
        return str(self._response.reason or "")

    async def read(self) -> bytes:
        return await self._response.read()

    def chunks(self) -> AsyncIterator[bytes]:
        return self._response.content.iter_any()

    async def __aenter__(self) -> HTTPReply:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._response.release()


@dataclass(frozen=True)
class _Unsent:
    """kubernetes_asyncio's refusal to send a request, as an answer with its status (0), reason and body."""

    status: int
    reason: str
    body: bytes

    async def read(self) -> bytes:
        return self.body

    async def chunks(self) -> AsyncIterator[bytes]:
        yield self.body

    async def __aenter__(self) -> _Unsent:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


class HTTPTransport:
    """kubernetes_asyncio's ApiClient: its configuration carries the server, credentials and TLS settings."""

    def __init__(self, api: k8s_client.ApiClient) -> None:
        self._api = api

    @classmethod
    def without_environment(cls, api: k8s_client.ApiClient) -> HTTPTransport:
        """kubernetes_asyncio's session trusts the environment, so aiohttp looks up proxy variables and reads
        ~/.netrc on every request: for a server given by URL (the embedded cluster's loopback
        server) neither applies, and at 64 simulated nodes those lookups were a tenth of the process's CPU."""
        rest = api.rest_client
        old: aiohttp.ClientSession = rest.pool_manager
        connector = old.connector
        old.detach()  # the new session owns the connector now
        rest.pool_manager = aiohttp.ClientSession(
            connector=connector, trust_env=False, read_bufsize=WATCH_READ_BUFFER
        )
        return cls(api)

    async def request(self, call: Call) -> Reply:
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            # Without _preload_content kubernetes_asyncio hands back error responses instead of raising.
            response = await self._api.call_api(
                call.path,
                call.method,
                query_params=call.query,
                header_params=call.headers,
                body=call.body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=call.timeout,
            )
        except ApiException as exc:  # kubernetes_asyncio could not even send the request
            return _Unsent(int(exc.status or 0), str(exc.reason or ""), str(exc.body or "").encode())
        return HTTPReply(response)

    async def close(self) -> None:
        await self._api.close()
