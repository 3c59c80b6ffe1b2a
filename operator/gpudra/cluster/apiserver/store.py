"""Per-resource object stores with indexes, a bounded event history and watch fan-out.

Stored objects are never mutated: every write stores a new dict together with its JSON encoding, so reads and
watch events send bytes encoded once. The global resourceVersion is an integer clock shared by all stores.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .selectorsyntax import FieldSelector, LabelSelector, field_value

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects

HISTORY_SIZE = 20_000
WATCH_QUEUE_LIMIT = 200_000


def encode(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


class Entry:
    """A stored object and its JSON encoding."""

    __slots__ = ("data", "obj")

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj
        self.data = encode(obj)

    @property
    def key(self) -> Key:
        meta = self.obj["metadata"]
        return (meta.get("namespace") or "", meta["name"])

    @property
    def rv(self) -> int:
        return int(self.obj["metadata"]["resourceVersion"])


class Clock:
    """The global resourceVersion counter."""

    def __init__(self) -> None:
        self.value = 0

    def tick(self) -> int:
        self.value += 1
        return self.value


@dataclass(slots=True)
class Event:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    entry: Entry
    prev: Entry | None


CLOSE = "CLOSE"  # queue item that ends a watch


@dataclass(eq=False)
class Watcher:
    """One open watch: its filters and the queue of (type, entry) items the HTTP layer drains."""

    namespace: str | None
    labels: LabelSelector | None
    fields: FieldSelector | None
    queue: asyncio.Queue[tuple[str, Entry | None]] = field(default_factory=asyncio.Queue)
    closed: bool = False

    def matches(self, entry: Entry) -> bool:
        obj = entry.obj
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        if self.labels is not None and not self.labels.matches(obj):
            return False
        return self.fields is None or self.fields.matches(obj)

    def push(self, kind: str, entry: Entry | None) -> None:
        if self.closed:
            return
        if self.queue.qsize() >= WATCH_QUEUE_LIMIT:  # a consumer this far behind re-lists, as with Kubernetes
            self.closed = True
            self.queue.put_nowait((CLOSE, None))
            return
        self.queue.put_nowait((kind, entry))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait((CLOSE, None))

    def offer(self, event: Event) -> None:
        """Queue ``event`` as this watcher sees it: objects leaving its selection arrive as DELETED."""
        now = self.matches(event.entry)
        if event.type != "MODIFIED" or event.prev is None:
            if now:
                self.push(event.type, event.entry)
            return
        before = self.matches(event.prev)
        if now:
            self.push("MODIFIED" if before else "ADDED", event.entry)
        elif before:
            self.push("DELETED", event.entry)


class Store:
    """The objects of one resource (all served versions share it)."""

    def __init__(
        self, indexed_fields: Iterable[str], start_rv: int, history_size: int = HISTORY_SIZE
    ) -> None:
        self.objects: dict[Key, Entry] = {}
        self.by_namespace: dict[str, dict[str, Entry]] = {}
        self.indexes: dict[str, dict[str, set[Key]]] = {f: {} for f in indexed_fields}
        self.history: deque[Event] = deque()
        self.history_size = history_size
        self.floor = start_rv  # events with rv <= floor may be missing from the history
        self.watchers: set[Watcher] = set()
        # watchers that select one value of a field (a kubelet's spec.nodeName, one object's metadata.name) are
        # offered only the events of objects with that value before or after: with a watch per node, offering
        # every event to every watcher cost more than the writes
        self._routes: dict[str, dict[str, set[Watcher]]] = {}  # field path -> value -> watchers
        self._unrouted: set[Watcher] = set()
        self._route_paths = ("metadata.name", *self.indexes)
        self.routed_history = RoutedHistory(self._route_paths)

    def __len__(self) -> int:
        return len(self.objects)

    def get(self, namespace: str, name: str) -> Entry | None:
        return self.objects.get((namespace, name))

    def candidates(self, namespace: str | None, fields: FieldSelector | None) -> Iterator[Entry]:
        """Entries that may match; uses metadata.name, the namespace and the field indexes."""
        if fields is not None:
            name = fields.equality("metadata.name")
            ns = namespace if namespace is not None else fields.equality("metadata.namespace")
            if name is not None and ns is not None:
                entry = self.objects.get((ns, name))
                yield from ([entry] if entry is not None else [])
                return
            if name is not None:
                # every namespace's object of that name (cluster-scoped objects are in ""): a node's agent lists
                # its own Node by name, and scanning every Node for it made a fleet's start quadratic
                for in_namespace in list(self.by_namespace.values()):
                    entry = in_namespace.get(name)
                    if entry is not None:
                        yield entry
                return
            if namespace is None and ns is not None:
                namespace = ns
            for path, index in self.indexes.items():
                value = fields.equality(path)
                if value is not None:
                    for key in list(index.get(value, ())):
                        if namespace is None or key[0] == namespace:
                            yield self.objects[key]
                    return
        if namespace is None:
            yield from list(self.objects.values())
        else:
            yield from list(self.by_namespace.get(namespace, {}).values())

    def select(
        self, namespace: str | None, labels: LabelSelector | None, fields: FieldSelector | None
    ) -> list[Entry]:
        result = [
            e
            for e in self.candidates(namespace, fields)
            if (labels is None or labels.matches(e.obj)) and (fields is None or fields.matches(e.obj))
        ]
        result.sort(key=lambda e: e.key)
        return result

    def _index(self, entry: Entry, key: Key, add: bool) -> None:
        for path, index in self.indexes.items():
            value = field_value(entry.obj, path)
            if add:
                index.setdefault(value, set()).add(key)
            else:
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]

    def put(self, entry: Entry, prev: Entry | None) -> None:
        """Store ``entry`` (ADDED, or MODIFIED when ``prev`` is given) and tell the watchers."""
        key = entry.key
        if prev is not None:
            self._index(prev, key, add=False)
        self.objects[key] = entry
        self.by_namespace.setdefault(key[0], {})[key[1]] = entry
        self._index(entry, key, add=True)
        self._emit(Event(entry.rv, "MODIFIED" if prev is not None else "ADDED", entry, prev))

    def remove(self, final: Entry, prev: Entry) -> None:
        """Remove the object; ``final`` is its last state (with the deletion's resourceVersion)."""
        key = prev.key
        self._index(prev, key, add=False)
        self.objects.pop(key, None)
        names = self.by_namespace.get(key[0])
        if names is not None:
            names.pop(key[1], None)
            if not names:
                del self.by_namespace[key[0]]
        self._emit(Event(final.rv, "DELETED", final, None))

    def add_watcher(self, watcher: Watcher) -> None:
        self.watchers.add(watcher)
        route = self.route(watcher)
        if route is None:
            self._unrouted.add(watcher)
        else:
            self._routes.setdefault(route[0], {}).setdefault(route[1], set()).add(watcher)

    def remove_watcher(self, watcher: Watcher) -> None:
        self.watchers.discard(watcher)
        self._unrouted.discard(watcher)
        route = self.route(watcher)
        if route is None or (by_value := self._routes.get(route[0])) is None:
            return
        routed = by_value.get(route[1], set())
        routed.discard(watcher)
        if not routed:
            by_value.pop(route[1], None)
            if not by_value:
                del self._routes[route[0]]

    def route(self, watcher: Watcher) -> tuple[str, str] | None:
        """The field path and the one value the watcher selects, when it selects one of the routed fields."""
        if watcher.fields is not None:
            for path in self._route_paths:
                value = watcher.fields.equality(path)
                if value is not None:
                    return path, value
        return None

    def _emit(self, event: Event) -> None:
        history = self.history
        history.append(event)
        routes = self.routed_history.add(event)
        if len(history) > self.history_size:
            self.floor = history.popleft().rv
            self.routed_history.forget(self.floor)
        for watcher in self._unrouted:
            watcher.offer(event)
        routed: set[Watcher] = set()
        for path, value in routes:
            by_value = self._routes.get(path)
            if by_value is not None:
                routed |= by_value.get(value, set())
        for watcher in routed:
            watcher.offer(event)

    def since(self, rv: int, route: tuple[str, str] | None = None) -> list[Event] | None:
        """Events after ``rv``; None when the history no longer reaches back that far (410 Expired). With a
        ``route`` (:meth:`route`), only the events of objects with that value before or after: the others cannot
        match its watcher."""
        if rv < self.floor:
            return None
        if route is not None:
            return self.routed_history.after(route, rv)
        return _after(self.history, rv)

    def close_watchers(self) -> None:
        for watcher in list(self.watchers):
            watcher.close()
        self.watchers.clear()
        self._routes.clear()
        self._unrouted.clear()


def _after(events: Sequence[Event], rv: int) -> list[Event]:
    """The events after ``rv`` of a sequence in resourceVersion order."""
    if not events or events[-1].rv <= rv:
        return []
    if events[0].rv > rv:
        return list(events)
    lo, hi = 0, len(events) - 1  # binary search for the first event after rv
    while lo < hi:
        mid = (lo + hi) // 2
        if events[mid].rv <= rv:
            lo = mid + 1
        else:
            hi = mid
    return [events[i] for i in range(lo, len(events))]


class RoutedHistory:
    """The history's events by the value of each routed field, before and after each event: a watch that selects
    one value (a node's agent watching its own ResourceSlices, or its Node by name) starts from a resourceVersion
    by reading only its objects' events. Reading the whole history for each instead made a fleet's start
    quadratic: each agent's watches began after hundreds of other nodes' writes.

    The events the history has dropped are swept from the lists once these hold twice the references they kept at
    the last sweep (``HISTORY_SIZE`` at least): about twice what the history's own events need, at most."""

    def __init__(self, paths: Iterable[str]) -> None:
        self._lists: dict[str, dict[str, list[Event]]] = {path: {} for path in paths}
        self.held = 0
        """References to events in the lists."""
        self._sweep_at = HISTORY_SIZE

    def add(self, event: Event) -> set[tuple[str, str]]:
        """File the event under its objects' routes, and return them."""
        routes = {
            (path, field_value(entry.obj, path))
            for path in self._lists
            for entry in (event.entry, event.prev)
            if entry is not None
        }
        for path, value in routes:
            self._lists[path].setdefault(value, []).append(event)
        self.held += len(routes)
        return routes

    def forget(self, floor: int) -> None:
        """The history no longer holds the events up to ``floor``."""
        if self.held < self._sweep_at:
            return
        held = 0
        for by_value in self._lists.values():
            for value, events in list(by_value.items()):
                kept = _after(events, floor)
                if kept:
                    by_value[value] = kept
                    held += len(kept)
                else:
                    del by_value[value]
        self.held = held
        self._sweep_at = max(HISTORY_SIZE, 2 * held)

    def after(self, route: tuple[str, str], rv: int) -> list[Event]:
        by_value = self._lists.get(route[0])
        return _after(by_value.get(route[1], []), rv) if by_value is not None else []
