"""Watch streams: JSON lines (or length-prefixed protobuf WatchEvents) over a chunked HTTP response (or an
in-process client's stream), fed from a store's watcher queue."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, Protocol

from aiohttp import web

from .database import Database
from .kubeproto import wire
from .kubeproto.convert import ConversionError
from .registry import ResourceType
from .selectorsyntax import FieldSelector, LabelSelector
from .store import CLOSE, Entry, Watcher, encode
from .tables import table

DEFAULT_TIMEOUT = 1800.0
IDLE_CHECK = 5.0  # seconds between checks for a gone client (and bookmarks) while idle
BOOKMARK_EVERY = 30.0
_INITIAL_END = "INITIAL_END"


class WatchSink(Protocol):
    """Where a watch's events go: a chunked HTTP response, or an in-process client's stream (local.py)."""

    async def open(self, content_type: str) -> None: ...

    async def write(self, data: bytes) -> None:
        """Raises ConnectionError once the client is gone."""
        ...

    async def close(self) -> None: ...

    def gone(self) -> bool:
        """Whether the client left (checked while the watch is idle)."""
        ...


class ResponseSink:
    """A watch served as a chunked HTTP response to ``request``."""

    def __init__(self, request: web.Request) -> None:
        self._request = request
        self.response = web.StreamResponse(status=200)

    async def open(self, content_type: str) -> None:
        self.response.headers.update({"Content-Type": content_type, "Cache-Control": "no-cache, private"})
        await self.response.prepare(self._request)

    async def write(self, data: bytes) -> None:
        await self.response.write(data)

    async def close(self) -> None:
        with contextlib.suppress(ConnectionError):
            await self.response.write_eof()

    def gone(self) -> bool:
        transport = self._request.transport
        return transport is None or transport.is_closing()


def object_bytes(rt: ResourceType, entry: Entry) -> bytes:
    """The stored encoding, re-encoded only when served under another version of a CRD."""
    if entry.obj.get("apiVersion") == rt.api_version:
        return entry.data
    return encode({**entry.obj, "apiVersion": rt.api_version})


class WatchRequest:
    def __init__(
        self,
        db: Database,
        rt: ResourceType,
        namespace: str | None,
        labels: LabelSelector | None,
        fields: FieldSelector | None,
        query: Any,
        table_mode: str | None,
        *,
        protobuf: bool = False,
    ) -> None:
        self.db, self.rt = db, rt
        self.namespace, self.labels, self.fields = namespace, labels, fields
        self.rv = query.get("resourceVersion") or ""
        self.bookmarks = query.get("allowWatchBookmarks", "") in ("true", "True", "1")
        self.send_initial = query.get("sendInitialEvents", "") in ("true", "True", "1")
        try:
            self.timeout = float(query.get("timeoutSeconds") or DEFAULT_TIMEOUT)
        except ValueError:
            self.timeout = DEFAULT_TIMEOUT
        self.initial_rv = 0
        self.table_mode = table_mode  # None, or the includeObject value for Table events
        self.protobuf = protobuf

    def _event(self, kind: str, obj: dict[str, Any]) -> bytes:
        if not self.protobuf:
            return encode({"type": kind, "object": obj}) + b"\n"
        try:
            return wire.watch_frame(kind, obj)
        except ConversionError as exc:
            status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 500}
            message = f"{obj.get('kind')} {obj.get('metadata', {}).get('name')} has no protobuf form: {exc}"
            return wire.watch_frame("ERROR", {**status, "reason": "InternalError", "message": message})

    def _line(self, kind: str, entry: Entry) -> bytes:
        if self.protobuf:
            return self._event(kind, {**entry.obj, "apiVersion": self.rt.api_version})
        if self.table_mode is not None:
            rows = table(self.rt, [json.loads(object_bytes(self.rt, entry))], str(entry.rv), self.table_mode)
            return encode({"type": kind, "object": rows}) + b"\n"
        return b'{"type":"' + kind.encode() + b'","object":' + object_bytes(self.rt, entry) + b"}\n"

    def _bookmark(self, initial_end: bool = False) -> bytes:
        rv = self.initial_rv if initial_end else self.db.clock.value
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return self._event(
            "BOOKMARK", {"kind": self.rt.kind, "apiVersion": self.rt.api_version, "metadata": meta}
        )

    async def serve(self, sink: WatchSink) -> None:
        store = self.db.store(self.rt)
        watcher = Watcher(self.namespace, self.labels, self.fields)
        expired: bytes | None = None
        if self.send_initial or self.rv in ("", "0"):
            self.initial_rv = self.db.clock.value
            for entry in store.select(self.namespace, self.labels, self.fields):
                watcher.push("ADDED", entry)
            if self.send_initial and self.bookmarks:
                watcher.push(_INITIAL_END, None)
        else:
            try:
                since = int(self.rv)
            except ValueError:
                since = -1
            events = store.since(since, store.route(watcher)) if since >= 0 else None
            if events is None:
                status = {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": f"too old resource version: {self.rv} ({store.floor + 1})",
                    "reason": "Expired",
                    "code": 410,
                }
                expired = self._event("ERROR", status)
            else:
                for event in events:
                    watcher.offer(event)
        if expired is None:
            store.add_watcher(watcher)
        try:
            await sink.open(wire.WATCH_STREAM if self.protobuf else "application/json")
            if expired is not None:
                await sink.write(expired)
            else:
                await self._pump(sink, watcher)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            store.remove_watcher(watcher)
        await sink.close()

    async def _pump(self, sink: WatchSink, watcher: Watcher) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        last_bookmark = loop.time()
        queue = watcher.queue
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            if queue.empty():
                try:
                    item = await asyncio.wait_for(queue.get(), min(remaining, IDLE_CHECK))
                except TimeoutError:
                    if sink.gone():
                        return
                    if self.bookmarks and loop.time() - last_bookmark >= BOOKMARK_EVERY:
                        last_bookmark = loop.time()
                        await sink.write(self._bookmark())
                    continue
            else:
                item = queue.get_nowait()
            chunk: list[bytes] = []
            while True:
                kind, entry = item
                if kind == CLOSE:
                    if chunk:
                        await sink.write(b"".join(chunk))
                    return
                if kind == _INITIAL_END:
                    chunk.append(self._bookmark(initial_end=True))
                elif entry is not None:
                    chunk.append(self._line(kind, entry))
                if queue.empty() or len(chunk) >= 256:
                    break
                item = queue.get_nowait()
            await sink.write(b"".join(chunk))
