"""A small informer: list, then watch from the list's resourceVersion, keeping a local cache and calling a handler
for each change. A watch that ends or expires (410) is resumed by re-listing, and the handler sees the difference
as ADDED / MODIFIED / DELETED, so no change is lost across a reconnect."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from gpudra.errors import KubeError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import Resource
from gpudra.telemetry import get_logger

log = get_logger(__name__)

Key = tuple[str, str]
Handler = Callable[[str, dict[str, Any]], Awaitable[None]]


def object_key(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata", {})
    return (meta.get("namespace") or "", meta.get("name", ""))


class Informer:
    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        handler: Handler | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        watch_timeout: int = 240,
    ) -> None:
        self._client = client
        self.resource = resource
        self._handler = handler
        self._labels = label_selector
        self._fields = field_selector
        self._timeout = watch_timeout
        self.cache: dict[Key, dict[str, Any]] = {}
        self.synced = asyncio.Event()

    async def _emit(self, kind: str, obj: dict[str, Any]) -> None:
        if self._handler is None:
            return
        try:
            await self._handler(kind, obj)
        except Exception:  # a handler bug must not stop the informer
            log.exception("informer handler failed", resource=self.resource.plural, object=object_key(obj))

    async def _relist(self) -> str:
        items, version = await self._client.list(
            self.resource, label_selector=self._labels, field_selector=self._fields
        )
        fresh = {object_key(o): o for o in items}
        old, self.cache = self.cache, fresh
        for key, obj in old.items():
            if key not in fresh:
                await self._emit("DELETED", obj)
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None:
                await self._emit("ADDED", obj)
            elif before.get("metadata", {}).get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                await self._emit("MODIFIED", obj)
        return version

    async def run(self) -> None:
        backoff = 0.1
        while True:
            try:
                version = await self._relist()
                self.synced.set()
                backoff = 0.1
                async for kind, obj in self._client.watch(
                    self.resource,
                    resource_version=version,
                    label_selector=self._labels,
                    field_selector=self._fields,
                    timeout_seconds=self._timeout,
                ):
                    if kind == "BOOKMARK":
                        continue
                    key = object_key(obj)
                    if kind == "DELETED":
                        self.cache.pop(key, None)
                    else:
                        self.cache[key] = obj
                    await self._emit(kind, obj)
            except (
                KubeError
            ) as exc:  # KubeConnectionError too: a restart of the API server, a broken connection
                if exc.status != 410:
                    log.warning("watch failed; re-listing", resource=self.resource.plural, error=str(exc))
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
