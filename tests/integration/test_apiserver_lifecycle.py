"""Conformance of the embedded API server: deletion, finalizers, garbage collection, namespaces."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from gpudra.testing import eventually

NODES = "/api/v1/nodes"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CMS = "/api/v1/namespaces/default/configmaps"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
GADGETS = "/apis/example.com/v1/namespaces/default/gadgets"
MERGE = {"Content-Type": "application/merge-patch+json"}


async def eventually_gone(http: aiohttp.ClientSession, url: str) -> None:
    for _ in range(200):
        async with http.get(url) as rsp:
            if rsp.status == 404:
                return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{url} still exists")


async def create(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> dict[str, Any]:
    async with http.post(url, json=body) as rsp:
        assert rsp.status == 201, await rsp.text()
        result: dict[str, Any] = await rsp.json()
        return result


def owned_by(owner: dict[str, Any]) -> list[dict[str, Any]]:
    meta = owner["metadata"]
    return [
        {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"]}
    ]


async def test_delete_without_finalizers_removes_and_answers_status(http: aiohttp.ClientSession) -> None:
    """DELETE of an object without finalizers removes it and answers a Success Status naming its uid."""
    obj = await create(http, CMS, {"metadata": {"name": "m"}})
    async with http.delete(f"{CMS}/m") as rsp:
        status = await rsp.json()
    assert rsp.status == 200
    assert status["status"] == "Success"
    assert status["details"]["uid"] == obj["metadata"]["uid"]
    async with http.get(f"{CMS}/m") as rsp:
        assert rsp.status == 404


async def test_finalizers_hold_deletion_until_removed(http: aiohttp.ClientSession) -> None:
    """With finalizers, DELETE sets deletionTimestamp (202) and keeps the object; new finalizers are refused
    (422); removing the last finalizer deletes it."""
    await create(http, CMS, {"metadata": {"name": "m", "finalizers": ["example.com/a"]}})
    async with http.delete(f"{CMS}/m") as rsp:
        assert rsp.status == 202
        obj = await rsp.json()
    assert obj["metadata"]["deletionTimestamp"]
    assert obj["metadata"]["deletionGracePeriodSeconds"] == 0
    body = {"metadata": {"finalizers": ["example.com/a", "example.com/b"]}}
    async with http.patch(f"{CMS}/m", json=body, headers=MERGE) as rsp:
        assert rsp.status == 422
    async with http.patch(f"{CMS}/m", json={"metadata": {"finalizers": None}}, headers=MERGE) as rsp:
        assert rsp.status == 200
    async with http.get(f"{CMS}/m") as rsp:
        assert rsp.status == 404


async def test_delete_preconditions(http: aiohttp.ClientSession) -> None:
    """DeleteOptions preconditions on uid and resourceVersion answer 409 when they do not hold."""
    await create(http, CMS, {"metadata": {"name": "m"}})
    async with http.delete(f"{CMS}/m", json={"preconditions": {"uid": "wrong"}}) as rsp:
        assert rsp.status == 409
    async with http.delete(f"{CMS}/m", json={"preconditions": {"resourceVersion": "1"}}) as rsp:
        assert rsp.status == 409


async def test_owner_deletion_collects_dependents_across_scopes(http: aiohttp.ClientSession) -> None:
    """Deleting a Node deletes the ResourceSlices it owns (cluster-scoped owner) and the ConfigMaps it owns
    (namespaced dependent); a dependent with another live owner survives."""
    node = await create(http, NODES, {"metadata": {"name": "node-1"}})
    other = await create(http, NODES, {"metadata": {"name": "node-2"}})
    spec = {
        "driver": "gpu.nvidia.com",
        "nodeName": "node-1",
        "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
    }
    await create(http, SLICES, {"metadata": {"name": "s1", "ownerReferences": owned_by(node)}, "spec": spec})
    await create(http, CMS, {"metadata": {"name": "m", "ownerReferences": owned_by(node)}})
    both = owned_by(node) + owned_by(other)
    await create(http, CMS, {"metadata": {"name": "shared", "ownerReferences": both}})
    async with http.delete(f"{NODES}/node-1") as rsp:
        assert rsp.status == 200
    await eventually_gone(http, f"{SLICES}/s1")
    await eventually_gone(http, f"{CMS}/m")
    async with http.get(f"{CMS}/shared") as rsp:
        assert rsp.status == 200


async def test_dependent_written_after_its_owner_is_gone_is_collected(http: aiohttp.ClientSession) -> None:
    """An object created with an ownerReference to an owner that no longer exists is collected."""
    owner = await create(http, CMS, {"metadata": {"name": "owner"}})
    async with http.delete(f"{CMS}/owner") as rsp:
        assert rsp.status == 200
    await create(http, CMS, {"metadata": {"name": "late", "ownerReferences": owned_by(owner)}})
    await eventually_gone(http, f"{CMS}/late")


async def test_deleting_a_crd_collects_the_dependents_of_its_objects(http: aiohttp.ClientSession) -> None:
    """Deleting a CRD removes its objects with it; what those objects owned is collected in turn."""
    crd = {
        "metadata": {"name": "gadgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }
    await create(http, CRDS, crd)
    gadget = await create(http, GADGETS, {"metadata": {"name": "g"}})
    await create(http, CMS, {"metadata": {"name": "part", "ownerReferences": owned_by(gadget)}})
    async with http.delete(f"{CRDS}/gadgets.example.com") as rsp:
        assert rsp.status == 200
    await eventually_gone(http, f"{CMS}/part")


async def test_collected_dependent_keeps_its_finalizers(http: aiohttp.ClientSession) -> None:
    """A collected dependent with finalizers gets a deletionTimestamp and waits for them."""
    owner = await create(http, CMS, {"metadata": {"name": "owner"}})
    meta = {"name": "dep", "ownerReferences": owned_by(owner), "finalizers": ["example.com/x"]}
    await create(http, CMS, {"metadata": meta})
    await http.delete(f"{CMS}/owner")
    for _ in range(200):
        async with http.get(f"{CMS}/dep") as rsp:
            if (await rsp.json())["metadata"].get("deletionTimestamp"):
                break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("the dependent was not marked for deletion")
    await http.patch(f"{CMS}/dep", json={"metadata": {"finalizers": None}}, headers=MERGE)
    await eventually_gone(http, f"{CMS}/dep")


async def test_orphan_propagation_removes_owner_references(http: aiohttp.ClientSession) -> None:
    """propagationPolicy=Orphan keeps the dependents and strips the ownerReference."""
    owner = await create(http, CMS, {"metadata": {"name": "owner"}})
    await create(http, CMS, {"metadata": {"name": "dep", "ownerReferences": owned_by(owner)}})
    async with http.delete(f"{CMS}/owner", json={"propagationPolicy": "Orphan"}) as rsp:
        assert rsp.status == 200

    async def orphaned() -> bool:
        async with http.get(f"{CMS}/dep") as rsp:
            assert rsp.status == 200, "the dependent was deleted"
            return "ownerReferences" not in (await rsp.json())["metadata"]

    await eventually(orphaned, what="the dependent without its ownerReference")
    await eventually_gone(http, f"{CMS}/owner")
    async with http.get(f"{CMS}/dep") as rsp:
        assert rsp.status == 200


async def test_foreground_deletion_waits_for_dependents(http: aiohttp.ClientSession) -> None:
    """propagationPolicy=Foreground keeps the owner (finalizer foregroundDeletion) until dependents go."""
    owner = await create(http, CMS, {"metadata": {"name": "owner"}})
    meta = {"name": "dep", "ownerReferences": owned_by(owner), "finalizers": ["example.com/x"]}
    await create(http, CMS, {"metadata": meta})
    async with http.delete(f"{CMS}/owner?propagationPolicy=Foreground") as rsp:
        assert rsp.status == 202
        assert "foregroundDeletion" in (await rsp.json())["metadata"]["finalizers"]

    async def dependent_deleting() -> bool:
        async with http.get(f"{CMS}/dep") as rsp:
            return bool((await rsp.json())["metadata"].get("deletionTimestamp"))

    await eventually(dependent_deleting, what="the dependent marked for deletion")
    async with http.get(
        f"{CMS}/owner"
    ) as rsp:  # the collector has acted on the dependent: the owner waits for it
        assert rsp.status == 200
    await http.patch(f"{CMS}/dep", json={"metadata": {"finalizers": None}}, headers=MERGE)
    await eventually_gone(http, f"{CMS}/owner")


async def test_delete_collection_with_selector(http: aiohttp.ClientSession) -> None:
    """DELETE on a collection deletes the objects matching the selectors and lists them."""
    for name, app in (("a", "x"), ("b", "x"), ("c", "y")):
        await create(http, CMS, {"metadata": {"name": name, "labels": {"app": app}}})
    async with http.delete(f"{CMS}?labelSelector=app%3Dx") as rsp:
        body = await rsp.json()
    assert body["kind"] == "ConfigMapList"
    assert sorted(i["metadata"]["name"] for i in body["items"]) == [
        "a",
        "b",
    ]
    async with http.get(CMS) as rsp:
        assert [i["metadata"]["name"] for i in (await rsp.json())["items"]] == ["c"]


async def test_namespace_deletion_empties_it(http: aiohttp.ClientSession) -> None:
    """Deleting a namespace marks it Terminating, refuses new content (403), deletes its objects and then
    the namespace itself."""
    await create(http, "/api/v1/namespaces", {"metadata": {"name": "team"}})
    cms = "/api/v1/namespaces/team/configmaps"
    await create(http, cms, {"metadata": {"name": "held", "finalizers": ["example.com/x"]}})
    async with http.delete("/api/v1/namespaces/team") as rsp:
        assert (await rsp.json())["status"]["phase"] == "Terminating"
    async with http.post(cms, json={"metadata": {"name": "new"}}) as rsp:
        assert rsp.status == 403
    await http.patch(f"{cms}/held", json={"metadata": {"finalizers": None}}, headers=MERGE)
    await eventually_gone(http, "/api/v1/namespaces/team")
