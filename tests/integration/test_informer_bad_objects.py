"""Informers never die on one bad object: every informer of the product and the stand-in control plane parses what
it hands on, and an object that does not parse is left out, logged once with its kind, name and field, and gets a
Warning Event; the objects beside it go through."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from gpudra.api.computedomain import ComputeDomainClique
from gpudra.api.core import Namespace, Node, Pod, Workload
from gpudra.api.dra import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from gpudra.kube.events import EventRecorder
from gpudra.kube.informer import Informer
from gpudra.kube.resources import (
    COMPUTE_DOMAIN_CLIQUES,
    DAEMONSETS,
    DEPLOYMENTS,
    DEVICE_CLASSES,
    JOBS,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    Resource,
)
from sourcekit import parse_file

SOURCE = Path(__file__).resolve().parents[2] / "operator" / "gpudra"


class FakeClient:
    """Lists ``items`` and then watches forever; records what is created (Events)."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.created: list[dict[str, Any]] = []

    async def list_raw(
        self, resource: Resource, namespace: str | None = None, **_: Any
    ) -> tuple[list[dict[str, Any]], str]:
        return [dict(item) for item in self.items], "7"

    async def watch(self, resource: Resource, **_: Any) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        await asyncio.Event().wait()
        yield "BOOKMARK", {}

    async def create(
        self, resource: Resource, body: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        self.created.append(body)
        return body


def obj(kind: str, name: str, rv: str = "1", **fields: Any) -> dict[str, Any]:
    meta = {"name": name, "uid": f"uid-{name}", "resourceVersion": rv}
    if kind in (
        "ResourceClaim",
        "ResourceClaimTemplate",
        "Pod",
        "DaemonSet",
        "Deployment",
        "Job",
        "ComputeDomainClique",
    ):
        meta["namespace"] = "default"
    return {"kind": kind, "metadata": meta, **fields}


GOOD_DEVICE = {"name": "gpu-0", "attributes": {"productName": {"string": "NVIDIA H100 80GB HBM3"}}}
BAD_DEVICE = {
    "name": "gpu-0",
    "attributes": {"productName": {"string": True}},
}  # a boolean where a string belongs
POOL = {"name": "n1", "generation": 1, "resourceSliceCount": 1}
REQUEST = {"name": "gpu", "exactly": {"deviceClassName": "g"}}
CASES: list[tuple[Resource, Callable[[dict[str, Any]], object], dict[str, Any], dict[str, Any], str]] = [
    (
        RESOURCE_SLICES, ResourceSlice.model_validate,
        obj("ResourceSlice", "bad", spec={"driver": "d", "nodeName": "n1", "pool": POOL, "devices": [BAD_DEVICE]}),
        obj("ResourceSlice", "good", spec={"driver": "d", "nodeName": "n2", "pool": POOL, "devices": [GOOD_DEVICE]}),
        "spec.devices[0].attributes.productName.string",
    ),
    (
        RESOURCE_CLAIMS, ResourceClaim.model_validate,
        obj("ResourceClaim", "bad", spec={"devices": {"requests": "gpu"}}),
        obj("ResourceClaim", "good", spec={"devices": {"requests": [REQUEST]}}),
        "spec.devices.requests",
    ),
    (
        DEVICE_CLASSES, DeviceClass.model_validate,
        obj("DeviceClass", "bad", spec={"selectors": "device.driver"}),
        obj("DeviceClass", "good", spec={"selectors": [{"cel": {"expression": "true"}}]}),
        "spec.selectors",
    ),
    (
        RESOURCE_CLAIM_TEMPLATES, ResourceClaimTemplate.model_validate,
        obj("ResourceClaimTemplate", "bad", spec={"spec": {"devices": {"requests": 5}}}),
        obj("ResourceClaimTemplate", "good", spec={"spec": {"devices": {"requests": []}}}),
        "spec.spec.devices.requests",
    ),
    (
        NAMESPACES, Namespace.model_validate,
        {"kind": "Namespace", "metadata": {"name": "bad", "uid": "u", "labels": {"team": ["a"]}}},
        obj("Namespace", "good"), "metadata.labels.team",
    ),
    (
        NODES, Node.model_validate,
        obj("Node", "bad", spec={"taints": [{"key": "x"}]}), obj("Node", "good", spec={"taints": []}),
        "spec.taints[0].effect",
    ),
    (
        PODS, Pod.model_validate,
        obj("Pod", "bad", spec={"containers": {"name": "a"}}), obj("Pod", "good", spec={"containers": [{"name": "a"}]}),
        "spec.containers",
    ),
    *(
        (
            resource, Workload.model_validate,
            obj(resource.kind, "bad", spec={"template": {"spec": {"containers": "a"}}}),
            obj(resource.kind, "good", spec={"template": {"spec": {"containers": []}}}),
            "spec.template.spec.containers",
        )
        for resource in (DAEMONSETS, DEPLOYMENTS, JOBS)
    ),
    (
        COMPUTE_DOMAIN_CLIQUES, ComputeDomainClique.model_validate,
        obj("ComputeDomainClique", "bad", daemons="all"), obj("ComputeDomainClique", "good", daemons=[]),
        "daemons",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("resource", "parse", "bad", "good", "field"), CASES, ids=[c[0].plural for c in CASES]
)
async def test_a_bad_object_is_left_out_told_once_and_the_rest_goes_on(
    resource: Resource,
    parse: Callable[[dict[str, Any]], object],
    bad: dict[str, Any],
    good: dict[str, Any],
    field: str,
) -> None:
    client = FakeClient([bad, good])
    seen: list[tuple[str, str]] = []

    async def handler(kind: str, body: dict[str, Any]) -> None:
        seen.append((kind, body["metadata"]["name"]))

    # the ignore below: a fake client with the calls the informer makes
    informer = Informer(client, resource, handler, parse=parse, events=EventRecorder(client, "test"))  # type: ignore[arg-type]
    with capture_logs() as logs:
        task = asyncio.create_task(informer.run())
        await asyncio.wait_for(informer.synced.wait(), 5)
        await informer._relist()  # the same bad version again: not told twice
        task.cancel()
    assert seen == [("ADDED", "good")]
    assert list(informer.cache) == [("default" if resource.namespaced else "", "good")]
    told = [entry for entry in logs if entry["event"] == "object ignored: it does not parse"]
    assert [(t["kind"], t["name"], t["field"]) for t in told] == [(resource.kind, "bad", field)]
    (event,) = client.created
    assert (event["reason"], event["involvedObject"]["name"], event["type"]) == (
        "InvalidObject",
        "bad",
        "Warning",
    )
    assert field in event["message"]


async def test_an_object_that_turns_bad_leaves_the_handler_as_deleted_and_comes_back_when_fixed() -> None:
    good = obj("ResourceSlice", "s", "1", spec={"driver": "d.example.com", "nodeName": "n1", "pool": POOL})
    client = FakeClient([good])
    seen: list[str] = []

    async def handler(kind: str, body: dict[str, Any]) -> None:
        seen.append(kind)

    # the ignore below: a fake client with the calls the informer makes
    informer = Informer(client, RESOURCE_SLICES, handler, parse=ResourceSlice.model_validate)  # type: ignore[arg-type]
    await informer._relist()
    client.items = [obj("ResourceSlice", "s", "2", spec={"driver": 5, "nodeName": "n1", "pool": POOL})]
    await informer._relist()
    assert informer.rejected == {("", "s"): "spec.driver: Input should be a valid string"}
    client.items = [{**good, "metadata": {**good["metadata"], "resourceVersion": "3"}}]
    await informer._relist()
    assert seen == ["ADDED", "DELETED", "ADDED"]
    assert informer.rejected == {}


def test_every_informer_in_the_code_parses_what_it_hands_on() -> None:
    """Each ``Informer(...)`` of the product and the stand-in control plane names a ``parse``."""
    calls = []
    for path in SOURCE.rglob("*.py"):
        for node in ast.walk(parse_file(path)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Informer":
                calls.append((path.relative_to(SOURCE), node.lineno, {k.arg for k in node.keywords}))
    assert len(calls) >= 14
    assert [(str(p), line) for p, line, keywords in calls if "parse" not in keywords] == []
