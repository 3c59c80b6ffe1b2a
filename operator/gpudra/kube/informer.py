"""A small informer: list, then watch from the list's resourceVersion, keeping a local cache and calling a handler
for each change, in one namespace (``namespace``, which needs only a Role there) or in all of them. A watch that
ends or expires (410) is resumed by re-listing, and the handler sees the difference as ADDED / MODIFIED /
DELETED, so no change is lost across a reconnect.

One bad object never stops an informer. With ``parse`` (a model's validation), an object that does not parse is
kept out of the cache and the handler, as if absent (a version of it that parsed before goes as DELETED), is
logged once per version with its kind, name and the field at fault, and gets a Warning Event (``events``). A
handler that fails on an object is logged once per version too; everything else goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from gpudra.errors import InvalidInputError, KubeError
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.resources import Resource
from gpudra.telemetry import get_logger

log = get_logger(__name__)

Key = tuple[str, str]
Handler = Callable[[str, dict[str, Any]], Awaitable[None]]
Parse = Callable[[dict[str, Any]], object]
_REPORTED_LIMIT = 10_000


def object_key(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata", {})
    return (meta.get("namespace") or "", meta.get("name", ""))


def fault(error: Exception) -> tuple[str, str]:
    """(field path, what is wrong) of a parse error: the first of a ValidationError's, else ('', the message)."""
    if isinstance(error, ValidationError):
        first = error.errors()[0]
        path = ""
        for part in first["loc"]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        return path, str(first["msg"])
    return "", str(error)


class Informer:
    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        handler: Handler | None = None,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        watch_timeout: int = 240,
        parse: Parse | None = None,
        events: EventRecorder | None = None,
    ) -> None:
        self._client = client
        self.resource = resource
        self._handler = handler
        self.namespace = namespace
        self._labels = label_selector
        self._fields = field_selector
        self._timeout = watch_timeout
        self._parse = parse
        self._events = events
        self._reported: set[tuple[str, str]] = set()  # (uid, resourceVersion) logged already
        self.cache: dict[Key, dict[str, Any]] = {}
        self.rejected: dict[Key, str] = {}
        """Objects kept out because they do not parse: key -> why (field: problem)."""
        self.synced = asyncio.Event()

    def _first_report(self, obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("uid") or object_key(obj)), str(meta.get("resourceVersion") or ""))
        if key in self._reported:
            return False
        if len(self._reported) > _REPORTED_LIMIT:
            self._reported.clear()
        self._reported.add(key)
        return True

    async def _admit(self, obj: dict[str, Any]) -> bool:
        """Whether ``obj`` parses; a first sight of an unparsable version is logged and posted as an Event."""
        if self._parse is None:
            return True
        try:
            self._parse(obj)
        except (ValidationError, InvalidInputError, ValueError, TypeError) as error:
            field, problem = fault(error)
            why = f"{field}: {problem}" if field else problem
            self.rejected[object_key(obj)] = why
            if self._first_report(obj):
                namespace, name = object_key(obj)
                kind = self.resource.kind
                log.warning(
                    "object ignored: it does not parse", kind=kind, namespace=namespace or None, name=name,
                    field=field, problem=problem,
                )  # fmt: skip
                if self._events is not None:
                    await self._events.post(
                        obj, "Warning", "InvalidObject", f"{kind} {name} is ignored until fixed: {why}"
                    )
            return False
        self.rejected.pop(object_key(obj), None)
        return True

    async def _emit(self, kind: str, obj: dict[str, Any]) -> None:
        if self._handler is None:
            return
        try:
            await self._handler(kind, obj)
        except Exception:  # a handler bug must not stop the informer; logged once per object version
            if self._first_report(obj):
                log.exception(
                    "informer handler failed", resource=self.resource.plural, object=object_key(obj)
                )

    async def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        """One change: to the cache and the handler, unless the object does not parse."""
        key = object_key(obj)
        if kind == "DELETED":
            self.rejected.pop(key, None)
            if self.cache.pop(key, None) is not None:
                await self._emit(kind, obj)
            return
        if not await self._admit(obj):
            gone = self.cache.pop(key, None)
            if gone is not None:
                await self._emit("DELETED", gone)
            return
        self.cache[key] = obj
        await self._emit(kind, obj)

    async def _relist(self) -> str:
        items, version = await self._client.list_raw(
            self.resource, self.namespace, label_selector=self._labels, field_selector=self._fields
        )
        fresh = {object_key(o): o for o in items}
        for key, obj in list(self.cache.items()):
            if key not in fresh:
                await self._apply("DELETED", obj)
        for key, obj in fresh.items():
            before = self.cache.get(key)
            if before is None:
                await self._apply("ADDED", obj)
            elif before.get("metadata", {}).get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                await self._apply("MODIFIED", obj)
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
                    self.namespace,
                    resource_version=version,
                    label_selector=self._labels,
                    field_selector=self._fields,
                    timeout_seconds=self._timeout,
                ):
                    if kind != "BOOKMARK":
                        await self._apply(kind, obj)
            # KubeConnectionError too: a restart of the API server, a broken connection
            except KubeError as exc:
                if exc.status != 410:
                    log.warning("watch failed; re-listing", resource=self.resource.plural, error=str(exc))
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
