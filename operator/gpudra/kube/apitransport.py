"""The transport over kubernetes_asyncio's ApiClient (aiohttp underneath): for kubeconfigs that need its loaders
(exec and auth-provider plugins, several files) and for the embedded cluster's loopback URL.

Importing this module imports aiohttp; importing kubernetes_asyncio (done where the ApiClient is built) loads every
generated model. A process that connects with plain credentials (the agent) imports neither. aiohttp's errors
that are not OSErrors (a payload cut short, a server that disconnects) are raised as ConnectionError, so callers
handle every transport's failures alike.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

import aiohttp

from gpudra.kube.transport import WATCH_READ_BUFFER, Call, Reply

if TYPE_CHECKING:
    from kubernetes_asyncio import client as k8s_client


def _broken(exc: aiohttp.ClientError) -> ConnectionError:
    return ConnectionError(f"{type(exc).__name__}: {exc}")


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
        try:
            return await self._response.read()
        except aiohttp.ClientError as exc:
            raise _broken(exc) from exc

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except aiohttp.ClientError as exc:
            raise _broken(exc) from exc

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
        except aiohttp.ClientError as exc:
            raise _broken(exc) from exc
        return HTTPReply(response)

    async def close(self) -> None:
        await self._api.close()
