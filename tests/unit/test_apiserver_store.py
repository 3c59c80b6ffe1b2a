"""The embedded API server's object store: what a list with a field selector visits and returns."""

from __future__ import annotations

from typing import Any

from gpudra.cluster.apiserver.selectorsyntax import FieldSelector
from gpudra.cluster.apiserver.store import HISTORY_SIZE, Entry, Event, Store, Watcher


def _entry(name: str, namespace: str | None = None, rv: int = 1) -> Entry:
    meta: dict[str, Any] = {"name": name, "resourceVersion": str(rv)}
    if namespace is not None:
        meta["namespace"] = namespace
    return Entry({"metadata": meta})


def _store(entries: list[Entry]) -> Store:
    store = Store((), start_rv=0)
    for entry in entries:
        store.put(entry, None)
    return store


def _by_name(name: str) -> FieldSelector:
    selector = FieldSelector.parse(f"metadata.name={name}")
    assert selector is not None
    return selector


def test_a_cluster_scoped_object_listed_by_name_is_looked_up_not_searched_for() -> None:
    """A node's agent lists its own Node by name: with 1,000 nodes, each such list visited every Node, and a
    fleet's start grew with the square of its size."""
    store = _store([_entry(f"node-{i}") for i in range(1000)])
    assert [e.key for e in store.candidates(None, _by_name("node-7"))] == [("", "node-7")]
    assert [e.key for e in store.select(None, None, _by_name("node-7"))] == [("", "node-7")]
    assert store.select(None, None, _by_name("node-1000")) == []


def test_a_name_across_every_namespace_visits_only_objects_of_that_name() -> None:
    store = _store([_entry("a", "one"), _entry("a", "two"), *(_entry(f"b{i}", "one") for i in range(100))])
    assert [e.key for e in store.candidates(None, _by_name("a"))] == [("one", "a"), ("two", "a")]
    assert [e.key for e in store.select(None, None, _by_name("a"))] == [("one", "a"), ("two", "a")]
    assert [e.key for e in store.select("two", None, _by_name("a"))] == [("two", "a")]
    both = FieldSelector.parse("metadata.name=a,metadata.namespace=one")
    assert [e.key for e in store.select(None, None, both)] == [("one", "a")]
    other = FieldSelector.parse("metadata.name=a,metadata.namespace!=one")
    assert [e.key for e in store.select(None, None, other)] == [("two", "a")]


def _slice(name: str, node: str, rv: int) -> Entry:
    return Entry({"metadata": {"name": name, "resourceVersion": str(rv)}, "spec": {"nodeName": node}})


def _offered(watcher: Watcher, events: list[Event]) -> list[tuple[str, str, str]]:
    for event in events:
        watcher.offer(event)
    items = []
    while not watcher.queue.empty():
        kind, entry = watcher.queue.get_nowait()
        assert entry is not None
        items.append((kind, entry.key[1], entry.obj["spec"]["nodeName"]))
    return items


def test_a_watch_of_one_nodes_objects_resumes_from_their_events_alone() -> None:
    """A node's agent watches its own ResourceSlices from the resourceVersion of its list: the events it is
    handed are the same as the whole history would give it (a slice that moved away arrives as DELETED), but
    only that node's events are read. Reading every event since, for every node's watch, made a fleet's start
    grow with the square of its size."""
    store = Store(("spec.nodeName",), start_rv=0)
    for i in range(500):
        store.put(_slice(f"s-{i}", f"node-{i}", i + 1), None)
    store.put(_slice("s-3", "node-7", 501), store.get("", "s-3"))  # moved onto node-7
    store.put(_slice("s-7", "node-8", 502), store.get("", "s-7"))  # and node-7's own away
    fields = FieldSelector.parse("spec.nodeName=node-7")
    routed, whole = Watcher(None, None, fields), Watcher(None, None, fields)
    assert store.route(routed) == ("spec.nodeName", "node-7")

    events = store.since(0, store.route(routed))
    assert events is not None and [e.rv for e in events] == [8, 501, 502]
    assert _offered(routed, events) == _offered(whole, store.since(0) or [])
    assert _offered(routed, store.since(0, store.route(routed)) or []) == [
        ("ADDED", "s-7", "node-7"),
        ("ADDED", "s-3", "node-7"),
        ("DELETED", "s-7", "node-8"),
    ]
    assert store.since(501, store.route(routed)) is not None
    assert [e.rv for e in store.since(501, store.route(routed)) or []] == [502]


def test_the_routed_events_follow_the_history_as_it_drops_old_ones() -> None:
    """Past its size the history forgets its oldest events, and a watch from before them is told to re-list
    (410); the per-node events are swept with it, so they hold no more than about twice the history."""
    store = Store(("spec.nodeName",), start_rv=0, history_size=100)
    rv = 0
    for _ in range(60):
        for i in range(500):
            rv += 1
            store.put(_slice(f"s-{i}", f"node-{i}", rv), store.get("", f"s-{i}"))
    fields = FieldSelector.parse("spec.nodeName=node-450")
    route = store.route(Watcher(None, None, fields))
    assert store.since(rv - 100 - 1, route) is None  # before the history's floor: 410
    events = store.since(rv - 100, route)
    assert events is not None and [e.rv for e in events] == [rv - 49]
    held = store.routed_history.held
    assert 0 < held <= 2 * max(HISTORY_SIZE, 100 * 2 * 2)
