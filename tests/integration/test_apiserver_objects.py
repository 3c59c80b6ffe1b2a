"""Conformance of the embedded API server: metadata, errors, PUT, patches and the status subresource."""

# kubernetes_asyncio's generated calls take dict bodies and `_content_type` (its users' documented way to send
# a merge patch), while their annotations name only the typed models: the type: ignores below say that.

from __future__ import annotations

import json
import re
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi, ResourceV1Api
from kubernetes_asyncio.client.exceptions import ApiException

from gpudra.api.computedomain import ComputeDomainClique
from gpudra.api.crdgen import crd_for
from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.cluster.apiserver.server import FAILED_TEST

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
MERGE = {"Content-Type": "application/merge-patch+json"}
JSON_PATCH = {"Content-Type": "application/json-patch+json"}


def claim(name: str = "c1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}, **spec},
    }


async def test_create_returns_201_with_server_set_metadata(kube_api: ApiClient) -> None:
    """POST answers 201 and sets uid, creationTimestamp (RFC3339 Z), resourceVersion, generation 1 and the
    namespace from the URL; kubernetes_asyncio's create_* returns the typed object."""
    api = ResourceV1Api(kube_api)
    created = await api.create_namespaced_resource_claim("default", claim())  # type: ignore[arg-type]
    meta = created.metadata
    assert meta.uid
    assert meta.resource_version
    assert meta.generation == 1
    assert meta.namespace == "default"
    raw = await CustomObjectsApi(kube_api).get_namespaced_custom_object(
        "resource.k8s.io", "v1", "default", "resourceclaims", "c1"
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", raw["metadata"]["creationTimestamp"])
    assert raw["kind"] == "ResourceClaim"
    assert raw["apiVersion"] == "resource.k8s.io/v1"


async def test_resource_versions_are_global_and_increasing(http: aiohttp.ClientSession) -> None:
    """Every write gets a larger resourceVersion, across resources."""
    versions = []
    for i in range(3):
        async with http.post(CLAIMS, json=claim(f"c{i}")) as rsp:
            versions.append(int((await rsp.json())["metadata"]["resourceVersion"]))
        async with http.post(
            "/api/v1/namespaces/default/configmaps", json={"metadata": {"name": f"m{i}"}}
        ) as rsp:
            versions.append(int((await rsp.json())["metadata"]["resourceVersion"]))
    assert versions == sorted(versions)
    assert len(set(versions)) == len(versions)


async def test_generate_name_gets_a_random_suffix(http: aiohttp.ClientSession) -> None:
    """generateName produces distinct names with a 5-character suffix."""
    names = set()
    for _ in range(5):
        async with http.post(CLAIMS, json={**claim(), "metadata": {"generateName": "pod-gpu-"}}) as rsp:
            assert rsp.status == 201
            names.add((await rsp.json())["metadata"]["name"])
    assert len(names) == 5
    assert all(re.fullmatch(r"pod-gpu-[a-z0-9]{5}", n) for n in names)


async def test_duplicate_name_is_409_already_exists(http: aiohttp.ClientSession) -> None:
    """Creating an existing name answers a Status with reason AlreadyExists and code 409."""
    await http.post(CLAIMS, json=claim())
    async with http.post(CLAIMS, json=claim()) as rsp:
        status = await rsp.json()
    assert rsp.status == 409
    assert status["kind"] == "Status"
    assert status["status"] == "Failure"
    assert status["reason"] == "AlreadyExists"
    assert status["details"] == {"name": "c1", "group": "resource.k8s.io", "kind": "resourceclaims"}


async def test_missing_name_is_422_and_unknown_object_404(
    kube_api: ApiClient, http: aiohttp.ClientSession
) -> None:
    """No name nor generateName: 422 Invalid. An unknown object: 404 NotFound (kubernetes_asyncio raises)."""
    async with http.post(CLAIMS, json={**claim(), "metadata": {}}) as rsp:
        assert rsp.status == 422
        assert (await rsp.json())["reason"] == "Invalid"
    with pytest.raises(ApiException) as info:
        await ResourceV1Api(kube_api).read_namespaced_resource_claim("nope", "default")
    assert info.value.status == 404
    async with http.get("/apis/resource.k8s.io/v1/nosuchthings") as rsp:
        assert rsp.status == 404
        assert (await rsp.json())["reason"] == "NotFound"


async def test_namespace_must_exist_and_match(http: aiohttp.ClientSession) -> None:
    """Namespaced objects need an existing namespace (404); a body namespace differing from the URL is 400."""
    async with http.post(CLAIMS.replace("default", "ghost"), json=claim()) as rsp:
        assert rsp.status == 404
    body = claim()
    body["metadata"]["namespace"] = "kube-system"
    async with http.post(CLAIMS, json=body) as rsp:
        assert rsp.status == 400
        assert (await rsp.json())["reason"] == "BadRequest"


async def test_put_with_stale_resource_version_is_409(http: aiohttp.ClientSession) -> None:
    """PUT with the current resourceVersion succeeds and bumps it; the old one then conflicts (409)."""
    async with http.post(CLAIMS, json=claim()) as rsp:
        obj = await rsp.json()
    obj["metadata"]["labels"] = {"a": "b"}
    async with http.put(f"{CLAIMS}/c1", json=obj) as rsp:
        assert rsp.status == 200
        updated = await rsp.json()
    assert int(updated["metadata"]["resourceVersion"]) > int(obj["metadata"]["resourceVersion"])
    async with http.put(f"{CLAIMS}/c1", json=obj) as rsp:
        assert rsp.status == 409
        assert (await rsp.json())["reason"] == "Conflict"


async def test_the_server_counts_conflicts(http: aiohttp.ClientSession, apiserver: EmbeddedAPIServer) -> None:
    """Benchmarks read how many writes were refused with 409 Conflict (AlreadyExists is counted apart)."""
    async with http.post(CLAIMS, json=claim()) as rsp:
        obj = await rsp.json()
    async with http.post(CLAIMS, json=claim()) as rsp:
        assert rsp.status == 409
    for _ in range(2):
        async with http.patch(
            f"{CLAIMS}/c1", json={"metadata": {"resourceVersion": "1"}}, headers=MERGE
        ) as rsp:
            assert rsp.status == 409
    assert obj["metadata"]["resourceVersion"] != "1"
    assert apiserver.conflicts == 2
    assert apiserver.errors[(409, "AlreadyExists")] == 1


async def test_no_op_write_keeps_resource_version(http: aiohttp.ClientSession) -> None:
    """Writing the same content again does not bump resourceVersion (no event either)."""
    async with http.post(CLAIMS, json=claim()) as rsp:
        obj = await rsp.json()
    async with http.put(f"{CLAIMS}/c1", json=obj) as rsp:
        again = await rsp.json()
    async with http.patch(f"{CLAIMS}/c1", json={"metadata": {"labels": None}}, headers=MERGE) as rsp:
        patched = await rsp.json()
    assert again["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]
    assert again["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]


async def test_generation_bumps_on_spec_change_only(http: aiohttp.ClientSession) -> None:
    """Label changes keep generation; spec changes bump it by one (a DeviceClass: a claim's spec is immutable)."""
    classes = "/apis/resource.k8s.io/v1/deviceclasses"
    selectors = [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]
    await http.post(classes, json={"metadata": {"name": "gpu"}, "spec": {"selectors": selectors}})
    async with http.patch(f"{classes}/gpu", json={"metadata": {"labels": {"x": "y"}}}, headers=MERGE) as rsp:
        assert (await rsp.json())["metadata"]["generation"] == 1
    spec = {"spec": {"selectors": [*selectors, {"cel": {"expression": "true"}}]}}
    async with http.patch(f"{classes}/gpu", json=spec, headers=MERGE) as rsp:
        assert (await rsp.json())["metadata"]["generation"] == 2


async def test_merge_patch_through_kubernetes_asyncio(kube_api: ApiClient) -> None:
    """A dict body with _content_type merge-patch merges maps and removes keys set to null."""
    api = CoreV1Api(kube_api)
    body = {"metadata": {"name": "m"}, "data": {"a": "1", "b": "2"}}
    await api.create_namespaced_config_map("default", body)  # type: ignore[arg-type]
    patched = await api.patch_namespaced_config_map(
        "m",
        "default",
        {"data": {"a": None, "c": "3"}},
        _content_type="application/merge-patch+json",  # type: ignore[call-arg]
    )
    assert patched.data == {"b": "2", "c": "3"}


async def test_merge_patch_with_stale_resource_version_is_409(http: aiohttp.ClientSession) -> None:
    """A resourceVersion inside a patch is a precondition."""
    await http.post(CLAIMS, json=claim())
    body = {"metadata": {"resourceVersion": "1", "labels": {"a": "b"}}}
    async with http.patch(f"{CLAIMS}/c1", json=body, headers=MERGE) as rsp:
        assert rsp.status == 409


async def test_json_patch_operations_and_failed_test_is_422(http: aiohttp.ClientSession) -> None:
    """JSON patch add/remove/replace/move/copy work; a failing test op answers 422 and changes nothing."""
    async with http.post(CLAIMS, json=claim()) as rsp:
        rv = (await rsp.json())["metadata"]["resourceVersion"]
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "add", "path": "/metadata/finalizers", "value": ["a/b"]},
        {"op": "add", "path": "/metadata/labels", "value": {"x": "1"}},
        {"op": "copy", "from": "/metadata/labels/x", "path": "/metadata/labels/y"},
        {"op": "move", "from": "/metadata/labels/x", "path": "/metadata/labels/z"},
        {"op": "replace", "path": "/metadata/labels/y", "value": "2"},
        {"op": "add", "path": "/metadata/finalizers/-", "value": "c/d"},
        {"op": "remove", "path": "/metadata/finalizers/0"},
    ]
    async with http.patch(f"{CLAIMS}/c1", json=ops, headers=JSON_PATCH) as rsp:
        obj = await rsp.json()
    assert obj["metadata"]["labels"] == {"y": "2", "z": "1"}
    assert obj["metadata"]["finalizers"] == ["c/d"]
    stale = [{"op": "test", "path": "/metadata/resourceVersion", "value": rv}, ops[2]]
    async with http.patch(f"{CLAIMS}/c1", json=stale, headers=JSON_PATCH) as rsp:
        assert rsp.status == 422


async def test_strategic_merge_patch_is_a_merge_without_directives(http: aiohttp.ClientSession) -> None:
    """Strategic merge directives are stripped and lists are replaced whole."""
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "image": "x"}]}}
    await http.post("/api/v1/namespaces/default/pods", json=pod)
    patch = {
        "metadata": {"labels": {"k": "v"}},
        "spec": {"$setElementOrder/containers": [{"name": "b"}], "containers": [{"name": "b", "image": "y"}]},
    }
    headers = {"Content-Type": "application/strategic-merge-patch+json"}
    async with http.patch("/api/v1/namespaces/default/pods/p", json=patch, headers=headers) as rsp:
        obj = await rsp.json()
    assert [(c["name"], c["image"]) for c in obj["spec"]["containers"]] == [("b", "y")]
    assert obj["metadata"]["labels"] == {"k": "v"}


async def test_apply_patch_creates_then_merges(http: aiohttp.ClientSession) -> None:
    """Server-side apply (application/apply-patch+yaml) creates a missing object (201), then merges (200)."""
    headers = {"Content-Type": "application/apply-patch+yaml"}
    body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  a: '1'\n"
    url = "/api/v1/namespaces/default/configmaps/applied?fieldManager=test&force=true"
    async with http.patch(url, data=body, headers=headers) as rsp:
        assert rsp.status == 201
    async with http.patch(url, data=body.replace("a: '1'", "b: '2'"), headers=headers) as rsp:
        assert rsp.status == 200
        assert (await rsp.json())["data"] == {"a": "1", "b": "2"}


async def test_an_apply_body_in_yaml_flow_style_is_read_as_yaml(http: aiohttp.ClientSession) -> None:
    """A body that starts like JSON but is YAML's flow style (unquoted keys) is still YAML: the JSON parser the
    server tries first for such bodies must not refuse it."""
    headers = {"Content-Type": "application/apply-patch+yaml"}
    body = "{apiVersion: v1, kind: ConfigMap, metadata: {name: flow}, data: {a: 'x: y'}}"
    url = "/api/v1/namespaces/default/configmaps/flow?fieldManager=test&force=true"
    async with http.patch(url, data=body, headers=headers) as rsp:
        assert rsp.status == 201
        assert (await rsp.json())["data"] == {"a": "x: y"}


async def test_apply_merges_a_list_map_item_by_item_and_failed_patch_tests_are_counted(
    http: aiohttp.ClientSession, apiserver: EmbeddedAPIServer
) -> None:
    """Applying one item of an ``x-kubernetes-list-type: map`` list (ComputeDomainClique's daemons, keyed by
    nodeName) merges it beside the items others applied, as kube-apiserver does: theirs stay where they are, a
    new key is appended, a known key's fields are merged. A JSON patch whose test fails is 422 and counted."""
    async with http.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd_for(ComputeDomainClique)
    ) as rsp:
        assert rsp.status == 201
    url = "/apis/resource.nvidia.com/v1beta1/namespaces/default/computedomaincliques/d.c"
    headers = {"Content-Type": "application/apply-patch+yaml"}

    def entry(node: str, **extra: Any) -> dict[str, Any]:
        return {"nodeName": node, "ipAddress": "10.0.0.1", "cliqueID": "c", **extra}

    def applied(*entries: dict[str, Any]) -> str:
        body = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomainClique"}
        return json.dumps({**body, "metadata": {"name": "d.c"}, "daemons": list(entries)})

    for node in ("a", "b"):
        async with http.patch(
            f"{url}?fieldManager={node}&force=true", data=applied(entry(node)), headers=headers
        ):
            pass
    async with http.patch(
        f"{url}?fieldManager=a&force=true", data=applied(entry("a", index=0, status="Ready")), headers=headers
    ) as rsp:
        daemons = (await rsp.json())["daemons"]
    assert [(d["nodeName"], d.get("index"), d["status"]) for d in daemons] == [
        ("a", 0, "Ready"),
        ("b", None, "NotReady"),
    ]
    test = [{"op": "test", "path": "/daemons/0/nodeName", "value": "b"}]
    async with http.patch(url, json=test, headers={"Content-Type": "application/json-patch+json"}) as rsp:
        assert rsp.status == 422
    assert apiserver.conflicts_by_resource["computedomaincliques" + FAILED_TEST] == 1


async def test_status_subresource_is_isolated(http: aiohttp.ClientSession) -> None:
    """/status writes change only status; writes to the object ignore status (resources with a status
    subresource). Status changes never bump generation."""
    await http.post(CLAIMS, json=claim())
    result = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}
    reserved = [{"resource": "pods", "name": "p", "uid": "u"}]
    status = {
        "status": {"allocation": {"devices": {"results": [result]}}, "reservedFor": reserved},
        "spec": {"x": 1},
    }
    async with http.patch(f"{CLAIMS}/c1/status", json=status, headers=MERGE) as rsp:
        obj = await rsp.json()
    assert obj["status"]["reservedFor"][0]["name"] == "p"
    assert "x" not in obj["spec"]
    assert obj["metadata"]["generation"] == 1
    async with http.patch(f"{CLAIMS}/c1", json={"status": {"reservedFor": []}}, headers=MERGE) as rsp:
        assert (await rsp.json())["status"]["reservedFor"][0]["name"] == "p"
    obj["status"] = {}
    async with http.put(f"{CLAIMS}/c1/status", json=obj) as rsp:
        assert rsp.status == 200
        assert (await rsp.json())["status"] == {}


async def test_a_status_write_is_decoded_as_kube_apiserver_decodes_it(http: aiohttp.ClientSession) -> None:
    """A /status write decodes the status it brings (the rest is the stored object): an unknown field is refused
    under Strict and dropped with a warning under Warn, a wrongly typed one is a 400 naming the Go field."""
    async with http.post(CLAIMS, json=claim()) as rsp:
        created = await rsp.json()
    result = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}
    reserved = [{"resource": "pods", "name": "p", "uid": "u", "bogus": 1}]
    body = {"status": {"allocation": {"devices": {"results": [result]}}, "reservedFor": reserved}}
    strict = f"{CLAIMS}/c1/status?fieldValidation=Strict"
    async with http.patch(strict, json=body, headers=MERGE) as rsp:
        assert rsp.status == 400
        assert 'unknown field "status.reservedFor[0].bogus"' in (await rsp.json())["message"]
    async with http.patch(f"{CLAIMS}/c1/status", json=body, headers=MERGE) as rsp:
        assert rsp.status == 200
        assert 'unknown field \\"status.reservedFor[0].bogus\\"' in rsp.headers["Warning"]
        obj = await rsp.json()
    assert obj["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "u"}]
    assert obj["spec"] == created["spec"]
    typed = {"status": {"reservedFor": "p"}}
    async with http.patch(f"{CLAIMS}/c1/status", json=typed, headers=MERGE) as rsp:
        assert rsp.status == 400
        assert (
            "cannot unmarshal string into Go struct field ResourceClaimStatus.status.reservedFor"
            in (await rsp.json())["message"]
        )


async def test_dry_run_does_not_store(http: aiohttp.ClientSession) -> None:
    """dryRun=All validates and answers without storing."""
    async with http.post(f"{CLAIMS}?dryRun=All", json=claim()) as rsp:
        assert rsp.status == 201
    async with http.get(f"{CLAIMS}/c1") as rsp:
        assert rsp.status == 404


async def test_pod_binding_sets_node_once(http: aiohttp.ClientSession) -> None:
    """POST pods/<name>/binding sets spec.nodeName; binding again is 409."""
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "image": "x"}]}}
    await http.post("/api/v1/namespaces/default/pods", json=pod)
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"name": "node-1"}}
    async with http.post("/api/v1/namespaces/default/pods/p/binding", json=binding) as rsp:
        assert rsp.status == 201
    async with http.get("/api/v1/namespaces/default/pods/p") as rsp:
        assert (await rsp.json())["spec"]["nodeName"] == "node-1"
    async with http.post("/api/v1/namespaces/default/pods/p/binding", json=binding) as rsp:
        assert rsp.status == 409
