"""A client of a real cluster that can only read: ``gpudra up --from-cluster`` talks to the real cluster through it
alone, so the copy never writes there, whatever the code around it does."""

from __future__ import annotations

from typing import Any

from gpudra.errors import GpudraError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import Resource


class ReadOnlyViolation(GpudraError):
    """Something tried to change the cluster that is only to be read."""


class ReadOnlyKube:
    """``get_raw`` and ``list_raw`` of a KubeClient; every other verb is refused before it reaches the server."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    async def get_raw(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        return await self._client.get_raw(res, name, namespace)

    async def list_raw(self, res: Resource, namespace: str | None = None) -> list[dict[str, Any]]:
        items, _ = await self._client.list_raw(res, namespace)
        return items

    async def close(self) -> None:
        await self._client.close()

    def __getattr__(self, name: str) -> Any:
        raise ReadOnlyViolation(
            f"{name}: the copied cluster is only read (get_raw, list_raw); nothing is written to it"
        )
