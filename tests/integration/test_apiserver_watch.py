"""Conformance of the embedded API server: typed lists, selectors and watches."""

# kubernetes_asyncio's generated calls take dict bodies and `_content_type` (its users' documented way to send
# a merge patch), while their annotations name only the typed models: the type: ignores below say that.

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from kubernetes_asyncio import watch
from kubernetes_asyncio.client import ApiClient, CoreV1Api, ResourceV1Api

from gpudra.cluster.apiserver import EmbeddedAPIServer

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CMS = "/api/v1/namespaces/default/configmaps"
MERGE = {"Content-Type": "application/merge-patch+json"}


def resource_slice(name: str, node: str, driver: str = "gpu.nvidia.com") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name, "labels": {"node": node, "tier": "a" if node.endswith("1") else "b"}},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
        },
    }


async def read_events(rsp: aiohttp.ClientResponse, count: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    while len(events) < count:
        line = await asyncio.wait_for(rsp.content.readline(), 10)
        if not line:
            break
        events.append(json.loads(line))
    return events


async def test_list_is_typed_with_resource_version(http: aiohttp.ClientSession) -> None:
    """LIST answers <Kind>List with apiVersion and metadata.resourceVersion; limit/continue are accepted."""
    await http.post(SLICES, json=resource_slice("s1", "node-1"))
    async with http.get(f"{SLICES}?limit=500") as rsp:
        body = await rsp.json()
    assert body["kind"] == "ResourceSliceList"
    assert body["apiVersion"] == "resource.k8s.io/v1"
    assert int(body["metadata"]["resourceVersion"]) > 0
    assert [i["metadata"]["name"] for i in body["items"]] == ["s1"]


async def test_field_selectors_on_resource_slices(http: aiohttp.ClientSession) -> None:
    """Field selectors spec.nodeName, spec.driver, spec.pool.name, metadata.name (=, ==, !=) filter lists."""
    for i, node in enumerate(["node-1", "node-1", "node-2"]):
        driver = "gpu.nvidia.com" if i < 2 else "compute-domain.nvidia.com"
        await http.post(SLICES, json=resource_slice(f"s{i}", node, driver))

    async def names(selector: str) -> list[str]:
        async with http.get(SLICES, params={"fieldSelector": selector}) as rsp:
            return [i["metadata"]["name"] for i in (await rsp.json())["items"]]

    assert await names("spec.nodeName=node-1") == ["s0", "s1"]
    assert await names("spec.driver==compute-domain.nvidia.com") == ["s2"]
    assert await names("spec.nodeName=node-1,metadata.name!=s0") == ["s1"]
    assert await names("spec.pool.name=node-2") == ["s2"]
    assert await names("metadata.name=s1") == ["s1"]
    assert await names("spec.nodeName=node-9") == []


async def test_label_selectors(http: aiohttp.ClientSession) -> None:
    """=, ==, !=, in, notin, exists and !exists label selectors."""
    for i, node in enumerate(["node-1", "node-2", "node-3"]):
        await http.post(SLICES, json=resource_slice(f"s{i}", node))

    async def names(selector: str) -> list[str]:
        async with http.get(SLICES, params={"labelSelector": selector}) as rsp:
            return [i["metadata"]["name"] for i in (await rsp.json())["items"]]

    assert await names("node=node-1") == ["s0"]
    assert await names("node==node-2") == ["s1"]
    assert await names("tier!=a") == ["s1", "s2"]
    assert await names("node in (node-1, node-3)") == ["s0", "s2"]
    assert await names("node notin (node-1),tier=b") == ["s1", "s2"]
    assert await names("tier") == ["s0", "s1", "s2"]
    assert await names("!missing,node=node-3") == ["s2"]
    async with http.get(SLICES, params={"labelSelector": "a in (b"}) as rsp:
        assert rsp.status == 400


async def test_pod_field_selectors(kube_api: ApiClient) -> None:
    """Pods filter by spec.nodeName and status.phase (also across all namespaces)."""
    api = CoreV1Api(kube_api)
    for name, node in (("a", "n1"), ("b", "n2")):
        pod = {
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
        }
        await api.create_namespaced_pod("default", pod)  # type: ignore[arg-type]
    pods = await api.list_pod_for_all_namespaces(field_selector="spec.nodeName=n2")
    assert [p.metadata.name for p in pods.items] == ["b"]
    pods = await api.list_namespaced_pod("default", field_selector="status.phase=Pending")
    assert len(pods.items) == 2


async def test_watch_from_resource_version_with_timeout(kube_api: ApiClient) -> None:
    """A kubernetes_asyncio watch from a list's resourceVersion sees only later events, typed, and the stream
    ends after timeoutSeconds."""
    api = CoreV1Api(kube_api)
    await api.create_namespaced_config_map("default", {"metadata": {"name": "before"}})  # type: ignore[arg-type]
    listed = await api.list_namespaced_config_map("default")
    rv = listed.metadata.resource_version

    async def write() -> None:  # before or after the watch starts: it begins at the list's resourceVersion
        await api.create_namespaced_config_map("default", {"metadata": {"name": "after"}})  # type: ignore[arg-type]
        await api.patch_namespaced_config_map(
            "after",
            "default",
            {"data": {"a": "1"}},
            _content_type="application/merge-patch+json",  # type: ignore[call-arg]
        )
        await api.delete_namespaced_config_map("after", "default")

    writer = asyncio.create_task(write())
    seen = []
    async with watch.Watch() as w:
        stream = w.stream(api.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=1)
        async for event in stream:
            seen.append((event["type"], event["object"].metadata.name))
    await writer
    assert seen == [("ADDED", "after"), ("MODIFIED", "after"), ("DELETED", "after")]


async def test_watch_without_resource_version_starts_with_synthetic_added(
    http: aiohttp.ClientSession,
) -> None:
    """A watch without resourceVersion (or "0") first sends ADDED for existing objects, then live events, as
    JSON lines with content type application/json; watch=1 and the /watch/ prefix work too."""
    await http.post(CMS, json={"metadata": {"name": "old"}})
    for url in (
        f"{CMS}?watch=1&timeoutSeconds=5",
        "/api/v1/watch/namespaces/default/configmaps?resourceVersion=0",
    ):
        async with http.get(url) as rsp:
            assert rsp.headers["Content-Type"].startswith("application/json")
            first = await read_events(rsp, 1)
            assert first[0]["type"] == "ADDED"
            assert first[0]["object"]["metadata"]["name"] == "old"


async def test_watch_selector_transitions(http: aiohttp.ClientSession) -> None:
    """With a label selector, an object entering the selection is ADDED and one leaving it is DELETED."""
    await http.post(CMS, json={"metadata": {"name": "m", "labels": {"app": "x"}}})
    async with http.get(CMS) as rsp:
        rv = (await rsp.json())["metadata"]["resourceVersion"]
    url = f"{CMS}?watch=true&labelSelector=app%3Dy&resourceVersion={rv}&timeoutSeconds=10"
    async with http.get(url) as rsp:
        await http.patch(f"{CMS}/m", json={"metadata": {"labels": {"app": "y"}}}, headers=MERGE)
        await http.patch(f"{CMS}/m", json={"data": {"k": "v"}}, headers=MERGE)
        await http.patch(f"{CMS}/m", json={"metadata": {"labels": {"app": "z"}}}, headers=MERGE)
        events = await read_events(rsp, 3)
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]


async def test_watch_field_selector_on_name(http: aiohttp.ClientSession) -> None:
    """fieldSelector=metadata.name=X narrows a watch to one object (what kubectl delete --wait uses)."""
    url = f"{CMS}?watch=true&fieldSelector=metadata.name%3Dtarget&timeoutSeconds=10"
    async with http.get(url) as rsp:
        await http.post(CMS, json={"metadata": {"name": "other"}})
        await http.post(CMS, json={"metadata": {"name": "target"}})
        await http.delete(f"{CMS}/target")
        events = await read_events(rsp, 2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "target"),
        ("DELETED", "target"),
    ]


async def test_a_kubelets_watch_sees_a_pod_from_its_binding_to_its_deletion(
    http: aiohttp.ClientSession,
) -> None:
    """A watch with fieldSelector=spec.nodeName=X (every kubelet's) gets the pod as ADDED when it is bound to X,
    though the pod existed before without a node; a watch of another node gets nothing."""
    pods = "/api/v1/namespaces/default/pods"
    await http.post(
        pods, json={"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    )
    mine = "/api/v1/pods?watch=true&fieldSelector=spec.nodeName%3Dn1&timeoutSeconds=5"
    other = "/api/v1/pods?watch=true&fieldSelector=spec.nodeName%3Dn2&timeoutSeconds=1"
    async with http.get(mine) as rsp, http.get(other) as rsp2:
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"name": "n1"}}
        async with http.post(f"{pods}/p/binding", json=binding) as bound:
            assert bound.status == 201
        await http.delete(f"{pods}/p")
        events = await read_events(rsp, 2)
        others = await read_events(rsp2, 1)  # ends empty when its watch times out
    assert [(e["type"], e["object"]["spec"].get("nodeName")) for e in events] == [
        ("ADDED", "n1"),
        ("DELETED", "n1"),
    ]
    assert others == []


async def test_a_watch_on_a_node_sees_a_slice_leave_it(http: aiohttp.ClientSession) -> None:
    """An object whose selected label changes away from the watched value arrives there as DELETED (a slice's
    spec.nodeName is immutable, as in Kubernetes)."""
    async with http.post(SLICES, json=resource_slice("moving", "node-1")) as created:
        assert created.status == 201
    url = f"{SLICES}?watch=true&labelSelector=node%3Dnode-1&timeoutSeconds=5"
    async with http.get(url) as rsp:
        await http.patch(f"{SLICES}/moving", json={"metadata": {"labels": {"node": "node-2"}}}, headers=MERGE)
        events = await read_events(rsp, 2)
    assert [(e["type"], e["object"]["metadata"]["labels"]["node"]) for e in events] == [
        ("ADDED", "node-1"),
        ("DELETED", "node-2"),
    ]


async def test_watch_from_expired_resource_version_is_410(
    http: aiohttp.ClientSession, apiserver: EmbeddedAPIServer
) -> None:
    """When the bounded history no longer reaches the asked resourceVersion, the watch sends one ERROR event
    with a Status of code 410 reason Expired."""
    await http.post(CMS, json={"metadata": {"name": "m"}})
    async with http.get(CMS) as rsp:
        rv = int((await rsp.json())["metadata"]["resourceVersion"])
    # Shrink the history so that a few writes expire it.
    server_store = apiserver.database.stores[("", "configmaps")]
    server_store.history_size = 2
    for i in range(4):
        await http.patch(f"{CMS}/m", json={"data": {"i": str(i)}}, headers=MERGE)
    async with http.get(f"{CMS}?watch=true&resourceVersion={rv}") as rsp:
        events = await read_events(rsp, 1)
    assert events[0]["type"] == "ERROR"
    assert events[0]["object"]["code"] == 410
    assert events[0]["object"]["reason"] == "Expired"


async def test_watch_bookmarks_and_initial_events_end(http: aiohttp.ClientSession) -> None:
    """sendInitialEvents=true with allowWatchBookmarks sends the current objects, then a BOOKMARK annotated
    k8s.io/initial-events-end."""
    await http.post(CMS, json={"metadata": {"name": "m"}})
    url = (
        f"{CMS}?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"
    )
    async with http.get(url) as rsp:
        events = await read_events(rsp, 2)
    assert events[0]["type"] == "ADDED"
    assert events[1]["type"] == "BOOKMARK"
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_resource_v1_watch_through_kubernetes_asyncio(kube_api: ApiClient) -> None:
    """ResourceV1Api list/watch of resourceslices with a field selector on spec.nodeName."""
    api = ResourceV1Api(kube_api)
    listed = await api.list_resource_slice()
    later = api.create_resource_slice(resource_slice("s-n2", "node-2"))  # type: ignore[arg-type]
    create = asyncio.ensure_future(later)
    await api.create_resource_slice(resource_slice("s-n1", "node-1"))  # type: ignore[arg-type]
    await create
    names = []
    async with watch.Watch() as w:
        stream = w.stream(
            api.list_resource_slice,
            field_selector="spec.nodeName=node-1",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=1,
        )
        async for event in stream:
            names.append(event["object"].metadata.name)
    assert names == ["s-n1"]
