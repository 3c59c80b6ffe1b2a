"""The embedded API server's object store: what a list with a field selector visits and returns."""

from __future__ import annotations

from typing import Any

from gpudra.cluster.apiserver.selectorsyntax import FieldSelector
from gpudra.cluster.apiserver.store import Entry, Store


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
