"""One informer per kind and selection for the whole controller: every consumer of a kind is handed the same
informer, so the kind is listed and watched once, and each consumer sees every change."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from gpudra.api.computedomain import ComputeDomainClique
from gpudra.api.core import Node, Pod
from gpudra.config import ControllerSettings
from gpudra.controller.kopfapp import build_controller
from gpudra.controller.webview.state import FleetView
from gpudra.errors import NotFoundError
from gpudra.kube import informer as informer_module
from gpudra.kube.client import KubeClient
from gpudra.kube.informer import Informers
from gpudra.kube.resources import COMPUTE_DOMAIN_CLIQUES, NODES, PODS, Resource
from gpudra.metrics import Metrics
from gpudra.testing import eventually


class CountingClient:
    """Lists one object of each kind, then watches forever; counts the lists and watches asked for."""

    def __init__(self) -> None:
        self.lists: Counter[str] = Counter()
        self.watches: Counter[str] = Counter()
        self.unserved: set[str] = set()

    async def list_raw(
        self, resource: Resource, namespace: str | None = None, **_: Any
    ) -> tuple[list[Any], str]:
        if resource.plural in self.unserved:
            raise NotFoundError(
                f"the server could not find the requested resource ({resource.plural})", status=404
            )
        self.lists[resource.plural] += 1
        meta = {"name": "one", "uid": "u1", "resourceVersion": "1"}
        if resource.namespaced:
            meta["namespace"] = "default"
        return [{"apiVersion": "v1", "kind": resource.kind, "metadata": meta}], "1"

    async def watch(
        self, resource: Resource, *_: Any, **__: Any
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        self.watches[resource.plural] += 1
        await asyncio.Event().wait()
        yield "BOOKMARK", {}


async def test_every_consumer_of_a_kind_shares_one_list_one_watch_and_sees_every_change() -> None:
    client = CountingClient()
    informers = Informers(cast(KubeClient, client))
    seen: list[tuple[str, str]] = []

    def consumer(who: str) -> Any:
        async def handler(kind: str, body: dict[str, Any]) -> None:
            seen.append((who, kind))

        return handler

    informers.informer(NODES, parse=Node.model_validate).subscribe(consumer("rollout"))
    informers.informer(NODES, parse=Node.model_validate).subscribe(consumer("domain status"))
    informers.informer(PODS, field_selector="spec.nodeName=", parse=Pod.model_validate).subscribe(
        consumer("pods")
    )
    assert len(informers) == 2
    running = asyncio.create_task(informers.run())
    try:
        await asyncio.wait_for(informers.synced(), 5)
        await eventually(lambda: sum(client.watches.values()) == 2, 5, what="each informer watching")
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    assert sorted(seen) == [("domain status", "ADDED"), ("pods", "ADDED"), ("rollout", "ADDED")]
    assert client.lists == {"nodes": 1, "pods": 1}
    assert client.watches == {"nodes": 1, "pods": 1}


async def test_a_consumer_cannot_join_late_or_read_a_kind_as_another_model() -> None:
    """A subscriber after the first listing would miss it, and two models for one kind would hand consumers
    different objects: both are refused, naming the kind."""
    informers = Informers(cast(KubeClient, CountingClient()))
    nodes = informers.informer(NODES, parse=Node.model_validate)
    with pytest.raises(ValueError, match="nodes"):
        informers.informer(NODES, parse=Pod.model_validate)
    running = asyncio.create_task(informers.run())
    try:
        await asyncio.wait_for(informers.synced(), 5)

        async def late(kind: str, body: dict[str, Any]) -> None:
            pass

        with pytest.raises(RuntimeError, match="nodes"):
            nodes.subscribe(late)
        with pytest.raises(RuntimeError, match="pods"):
            informers.informer(PODS, parse=Pod.model_validate)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


async def test_an_optional_kind_the_server_does_not_serve_is_watched_once_served_and_not_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A controller on a cluster without the ComputeDomain CRDs is ready all the same, and sees the cliques once
    the CRDs are installed; the absence is said once, not at every retry."""
    monkeypatch.setattr(informer_module, "OPTIONAL_RETRY_SECONDS", 0.01)
    client = CountingClient()
    client.unserved.add("computedomaincliques")
    informers = Informers(cast(KubeClient, client))
    informers.informer(NODES, parse=Node.model_validate)
    cliques = informers.informer(
        COMPUTE_DOMAIN_CLIQUES, parse=ComputeDomainClique.model_validate, optional=True
    )
    with capture_logs() as logs:
        running = asyncio.create_task(informers.run())
        try:
            await asyncio.wait_for(informers.synced(), 5)
            assert not cliques.synced.is_set()
            client.unserved.clear()  # the CRD is installed
            await asyncio.wait_for(cliques.synced.wait(), 5)
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
    assert list(cliques.cache) == [("default", "one")]
    said = [entry for entry in logs if entry.get("resource") == "computedomaincliques"]
    assert [entry["event"] for entry in said] == ["not served by the API server; watched once it is"]


def test_the_web_view_watches_through_the_controllers_informers() -> None:
    """In a controller that serves the web view, a kind both watch (Nodes, slices, claims, DeviceClasses, waiting
    pods, cliques, namespaces) is listed and watched once: the view adds only the kinds no cache of the controller
    uses."""
    client = KubeClient.__new__(KubeClient)  # building calls no API
    controller = build_controller(ControllerSettings(), Metrics(), client)
    alone = len(controller.informers)
    FleetView(controller.informers)
    assert len(controller.informers) - alone == len({"computedomains", "miglayouts"})


class EndingClient:
    """A server that ends the first watch after one change (kube-apiserver closes a watcher that reads too slowly)
    while a second object is created and modified; a list shows only each object's latest state."""

    def __init__(self) -> None:
        self.lists = 0
        self.watched_from: list[str] = []

    @staticmethod
    def _node(name: str, version: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "resourceVersion": version}}

    async def list_raw(self, resource: Resource, *_: Any, **__: Any) -> tuple[list[Any], str]:
        self.lists += 1
        if self.lists == 1:
            return [], "1"
        return [self._node("a", "2"), self._node("b", "4")], "4"

    async def watch(
        self, resource: Resource, *_: Any, resource_version: str = "", **__: Any
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        self.watched_from.append(resource_version)
        if resource_version == "1":
            yield "ADDED", self._node("a", "2")
            return  # the server ends the watch
        if resource_version == "2":
            yield "ADDED", self._node("b", "3")
            yield "MODIFIED", self._node("b", "4")
        await asyncio.Event().wait()


async def test_a_watch_the_server_ends_resumes_where_it_was_and_hands_on_every_change() -> None:
    """A controller too slow for kube-apiserver's watch cache gets its watch closed; it goes on from the last change
    it saw, so each change reaches the handlers (a claim created and allocated meanwhile is two changes, not one
    coalesced by a re-list) and the kind is not listed again."""
    client = EndingClient()
    informers = Informers(cast(KubeClient, client))
    seen: list[tuple[str, str]] = []

    async def handler(kind: str, body: dict[str, Any]) -> None:
        seen.append((kind, body["metadata"]["name"]))

    informers.informer(NODES, parse=Node.model_validate).subscribe(handler)
    running = asyncio.create_task(informers.run())
    try:
        await eventually(lambda: len(client.watched_from) >= 2, 5, what="the watch resumed")
        await eventually(lambda: len(seen) >= 3, 5, what="every change handed on")
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    assert seen == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "b")]
    assert client.watched_from == ["1", "2"]
    assert client.lists == 1


class RemakingClient:
    """Lists node "a"; the watch hands nothing and ends (so the informer lists again), and meanwhile "a" was
    deleted and made again under its name: the second list shows another uid."""

    def __init__(self) -> None:
        self.lists = 0

    async def list_raw(self, resource: Resource, *_: Any, **__: Any) -> tuple[list[Any], str]:
        self.lists += 1
        uid, version = ("u1", "1") if self.lists == 1 else ("u2", "3")
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "a", "uid": uid, "resourceVersion": version},
        }
        return [node], version

    async def watch(
        self, resource: Resource, *_: Any, **__: Any
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        if self.lists == 1:
            return
        await asyncio.Event().wait()
        yield "BOOKMARK", {}


async def test_an_object_made_again_under_its_name_while_unwatched_is_handed_as_deleted_then_added() -> None:
    """Handlers keep what they know of an object by its uid (a claim's allocation metrics, its pending record): a
    re-list that finds another object under a known name hands the first one's deletion, then the new one, as a
    watch would have, not a change of the first one into the second."""
    client = RemakingClient()
    informers = Informers(cast(KubeClient, client))
    seen: list[tuple[str, str]] = []

    async def handler(kind: str, body: dict[str, Any]) -> None:
        seen.append((kind, body["metadata"]["uid"]))

    informers.informer(NODES, parse=Node.model_validate).subscribe(handler)
    running = asyncio.create_task(informers.run())
    try:
        await eventually(lambda: "u2" in {uid for _, uid in seen}, 5, what="the new object handed on")
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    assert seen == [("ADDED", "u1"), ("DELETED", "u1"), ("ADDED", "u2")]


class ManagedClient:
    """Lists node "a" and watches one change of it, each with the managedFields kube-apiserver sends."""

    managed = [
        {"manager": "kubelet", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}
    ]

    def _node(self, version: str) -> dict[str, Any]:
        meta = {"name": "a", "uid": "u1", "resourceVersion": version, "managedFields": self.managed}
        return {"apiVersion": "v1", "kind": "Node", "metadata": meta}

    async def list_raw(self, resource: Resource, *_: Any, **__: Any) -> tuple[list[Any], str]:
        return [self._node("1")], "1"

    async def watch(
        self, resource: Resource, *_: Any, **__: Any
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        yield "MODIFIED", self._node("2")
        await asyncio.Event().wait()


async def test_an_informer_keeps_and_hands_objects_without_their_managed_fields() -> None:
    """managedFields (who wrote which field: entries per manager, on every claim and Node) are read by no handler;
    an informer drops them from each object it keeps: for a claim of the controller benchmark, 10 of the 68
    objects kept per claim that the garbage collector walks, and its memory."""
    informers = Informers(cast(KubeClient, ManagedClient()))
    seen: list[dict[str, Any]] = []

    async def handler(kind: str, body: dict[str, Any]) -> None:
        seen.append(body)

    nodes = informers.informer(NODES, parse=Node.model_validate)
    nodes.subscribe(handler)
    running = asyncio.create_task(informers.run())
    try:
        await eventually(lambda: len(seen) >= 2, 5, what="the list and the change handed on")
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    assert [b["metadata"]["resourceVersion"] for b in seen] == ["1", "2"]
    assert all("managedFields" not in b["metadata"] for b in [*seen, *nodes.cache.values()])
