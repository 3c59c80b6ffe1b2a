"""Conformance of the embedded API server: discovery, /version, OpenAPI v3, Table output and CRDs."""

# kubernetes_asyncio's generated calls take dict bodies and `_content_type` (its users' documented way to send
# a merge patch), while their annotations name only the typed models: the type: ignores below say that.

from __future__ import annotations

from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient, CustomObjectsApi, VersionApi

from gpudra.testing import eventually

TABLE = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {
                        "name": "Ready",
                        "type": "string",
                        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
                    },
                    {"name": "First", "type": "string", "jsonPath": ".spec.items[0].name"},
                ],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "size": {"type": "integer", "default": 3},
                                    "items": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "properties": {"name": {"type": "string"}},
                                        },
                                    },
                                },
                            },
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}


async def test_core_and_group_discovery(http: aiohttp.ClientSession) -> None:
    """/api lists v1; /api/v1 has groupVersion "v1" with short names and subresources; /apis lists groups;
    /apis/<group> and /apis/<group>/<version> describe them."""
    async with http.get("/api") as rsp:
        assert (await rsp.json())["versions"] == ["v1"]
    async with http.get("/api/v1") as rsp:
        core = await rsp.json()
    assert core["kind"] == "APIResourceList"
    assert core["groupVersion"] == "v1"
    by_name = {r["name"]: r for r in core["resources"]}
    assert by_name["pods"]["shortNames"] == ["po"]
    assert by_name["pods"]["categories"] == ["all"]
    assert by_name["nodes"]["namespaced"] is False
    assert "pods/status" in by_name
    assert "pods/binding" in by_name
    assert "watch" in by_name["pods"]["verbs"]
    async with http.get("/apis") as rsp:
        groups = {g["name"]: g for g in (await rsp.json())["groups"]}
    assert groups["resource.k8s.io"]["preferredVersion"]["groupVersion"] == "resource.k8s.io/v1"
    async with http.get("/apis/resource.k8s.io") as rsp:
        assert (await rsp.json())["kind"] == "APIGroup"
    async with http.get("/apis/resource.k8s.io/v1") as rsp:
        dra = {r["name"]: r for r in (await rsp.json())["resources"]}
    assert dra["resourceslices"]["namespaced"] is False
    assert "shortNames" not in dra["resourceclaims"]
    assert "resourceclaims/status" in dra
    async with http.get("/apis/apiextensions.k8s.io/v1") as rsp:
        crd = {r["name"]: r for r in (await rsp.json())["resources"]}
    assert crd["customresourcedefinitions"]["shortNames"] == ["crd", "crds"]


async def test_version_and_health(kube_api: ApiClient, http: aiohttp.ClientSession) -> None:
    """/version reports a 1.37 server (the default emulated version); /healthz, /readyz and /livez answer ok."""
    info = await VersionApi(kube_api).get_code()
    assert (info.major, info.minor) == ("1", "37")
    assert info.git_version.startswith("v1.37")
    for path in ("/healthz", "/readyz", "/livez"):
        async with http.get(path) as rsp:
            assert await rsp.text() == "ok"


async def test_openapi_v3_declares_field_validation(http: aiohttp.ClientSession) -> None:
    """/openapi/v3 indexes every group-version; each document has PATCH operations tagged with the kind that
    declare the fieldValidation query parameter."""
    async with http.get("/openapi/v3") as rsp:
        paths = (await rsp.json())["paths"]
    assert "api/v1" in paths
    assert "apis/resource.k8s.io/v1" in paths
    async with http.get(paths["apis/resource.k8s.io/v1"]["serverRelativeURL"]) as rsp:
        doc = await rsp.json()
    ops = [p["patch"] for p in doc["paths"].values()]
    claim_op = next(op for op in ops if op["x-kubernetes-group-version-kind"]["kind"] == "ResourceClaim")
    assert {"name": "fieldValidation", "in": "query"}.items() <= claim_op["parameters"][2].items()


async def test_table_output_for_claims_and_slices(http: aiohttp.ClientSession) -> None:
    """Accept as=Table returns meta.k8s.io/v1 Tables: claims NAME/STATE/AGE with STATE pending, allocated,
    reserved; slices NAME/NODE/DRIVER/POOL/AGE; includeObject controls the row object."""
    claims = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
    await http.post(claims, json={"metadata": {"name": "c"}, "spec": {}})
    async with http.get(claims, headers=TABLE) as rsp:
        table = await rsp.json()
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name",
        "State",
        "Age",
    ]
    assert table["rows"][0]["cells"][:2] == ["c", "pending"]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    status = {
        "status": {
            "allocation": {"devices": {"results": []}},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}],
        }
    }
    await http.patch(
        f"{claims}/c/status", json=status, headers={"Content-Type": "application/merge-patch+json"}
    )
    async with http.get(f"{claims}/c?includeObject=Object", headers=TABLE) as rsp:
        row = (await rsp.json())["rows"][0]
    assert row["cells"][1] == "allocated,reserved"
    assert row["object"]["kind"] == "ResourceClaim"
    slice_ = {
        "metadata": {"name": "s"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "n1",
            "pool": {"name": "n1", "resourceSliceCount": 1},
        },
    }
    await http.post("/apis/resource.k8s.io/v1/resourceslices", json=slice_)
    async with http.get("/apis/resource.k8s.io/v1/resourceslices?includeObject=None", headers=TABLE) as rsp:
        table = await rsp.json()
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Node", "Driver", "Pool", "Age"]
    assert table["rows"][0]["cells"][:4] == ["s", "n1", "gpu.nvidia.com", "n1"]
    assert "object" not in table["rows"][0]


async def test_node_table_reads_ready_condition(http: aiohttp.ClientSession) -> None:
    """Nodes show STATUS from the Ready condition, ROLES from node-role labels and VERSION from nodeInfo."""
    node = {
        "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/gpu": ""}},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"kubeletVersion": "v1.34.0"},
        },
    }
    await http.post("/api/v1/nodes", json=node)
    async with http.get("/api/v1/nodes", headers=TABLE) as rsp:
        cells = (await rsp.json())["rows"][0]["cells"]
    assert cells[:3] == ["n1", "Ready", "gpu"]
    assert cells[4] == "v1.34.0"


async def test_crd_becomes_served_with_conditions_defaults_and_columns(
    kube_api: ApiClient, http: aiohttp.ClientSession
) -> None:
    """A created CRD gets NamesAccepted and Established conditions, appears in discovery, serves objects
    (defaults from its schema applied), and its printer columns show in Table output; deleting the CRD
    removes the resource."""
    async with http.post(CRDS, json=WIDGET_CRD) as rsp:
        crd = await rsp.json()
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    assert crd["status"]["acceptedNames"]["kind"] == "Widget"
    async with http.get("/apis/example.com/v1") as rsp:
        resources = {r["name"]: r for r in (await rsp.json())["resources"]}
    assert resources["widgets"]["shortNames"] == ["wd"]
    assert "widgets/status" in resources
    api = CustomObjectsApi(kube_api)
    body = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"items": [{"name": "i"}]},
    }
    created = await api.create_namespaced_custom_object("example.com", "v1", "default", "widgets", body)
    assert created["spec"]["size"] == 3
    status = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    await api.patch_namespaced_custom_object_status(
        "example.com",
        "v1",
        "default",
        "widgets",
        "w",
        status,
        _content_type="application/merge-patch+json",  # type: ignore[call-arg]
    )
    async with http.get("/apis/example.com/v1/namespaces/default/widgets", headers=TABLE) as rsp:
        table = await rsp.json()
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Size", "Ready", "First"]
    assert table["rows"][0]["cells"] == ["w", 3, "True", "i"]
    async with http.delete(f"{CRDS}/widgets.example.com") as rsp:
        assert rsp.status == 200

    async def unserved() -> bool:
        async with http.get("/apis/example.com/v1/namespaces/default/widgets") as rsp:
            return rsp.status == 404

    await eventually(unserved, what="the deleted CRD's resource no longer served")
