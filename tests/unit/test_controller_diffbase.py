"""The controller's kopf essence storage: the essence kopf's default storage computes, without copying status."""

from __future__ import annotations

import json
from typing import Any

import kopf
import pytest

from gpudra.controller.diffbase import LeanDiffBaseStorage, LeanProgressStorage

OWNED = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "u1", "controller": True}]
LAST = json.dumps({"spec": {"replicas": 1}})


@pytest.mark.parametrize(
    ("body", "extra"),
    [
        pytest.param(
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "c", "namespace": "n", "uid": "u", "resourceVersion": "7",
                          "labels": {"a": "b"}, "annotations": {"x/y": "z"}},
             "spec": {"devices": {"requests": [{"name": "gpu"}]}},
             "status": {"allocation": {"devices": {"results": [{"device": "gpu-0"}]}}}},
            None, id="claim with status",
        ),
        pytest.param(
            {"apiVersion": "apps/v1", "kind": "ReplicaSet",
             "metadata": {"name": "r", "ownerReferences": OWNED,
                          "annotations": {"kopf.zalando.org/last-handled-configuration-ofDRS": LAST,
                                          "other.example/kopf-managed": "yes", "other.example/x": "1",
                                          "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
             "spec": {"replicas": 2}, "status": {"replicas": 1}},
            None, id="kopf's own and other operators' annotations",
        ),
        pytest.param(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}, "status": {"phase": "x"}},
            None, id="status only",
        ),
        pytest.param(
            {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain", "metadata": {"name": "d"},
             "spec": {"numNodes": 0}, "status": {"status": "Ready", "nodes": [{"name": "a"}]}},
            ["status.status"], id="an extra field in status",
        ),
    ],
)  # fmt: skip
def test_the_essence_is_the_one_kopf_computes(body: dict[str, Any], extra: list[str] | None) -> None:
    wanted = kopf.AnnotationsDiffBaseStorage().build(body=kopf.Body(body), extra_fields=extra)
    got = LeanDiffBaseStorage().build(body=kopf.Body(body), extra_fields=extra)
    assert got == wanted


@pytest.mark.parametrize(
    "essence",
    [
        pytest.param({"spec": {"devices": {"requests": [{"name": "gpu"}]}}}, id="spec only"),
        pytest.param({"spec": {"a": 1}, "metadata": {"labels": {"a": "b"}}}, id="labels"),
        pytest.param({"spec": {}, "metadata": {"annotations": {"x/y": "z"}}}, id="other annotations"),
        pytest.param(
            {"spec": {}, "metadata": {"annotations": {"kopf.zalando.org/create_fn": '{"retries": 1}', "x/y": "z"}}},
            id="a progress record",
        ),
        pytest.param(
            {"spec": {}, "metadata": {"annotations": {"kopf.zalando.org/create_fn": "{}"}}},
            id="only a progress record",
        ),
        pytest.param({"spec": {}, "status": {"kopf": {"progress": {"fn": {"retries": 2}}}}}, id="status progress"),
        pytest.param({"spec": {}, "status": {"kopf": {"progress": {}}, "ready": True}}, id="status beside it"),
        pytest.param({"spec": {}, "metadata": {}}, id="empty metadata"),
        pytest.param({"spec": {}, "metadata": {"labels": {}, "annotations": {}}}, id="empty stanzas"),
        pytest.param({"spec": {}, "status": {}}, id="empty status"),
    ],
)  # fmt: skip
def test_a_cleared_essence_is_the_one_kopf_clears(essence: dict[str, Any]) -> None:
    wanted = kopf.SmartProgressStorage().clear(essence=json.loads(json.dumps(essence)))
    given = json.loads(json.dumps(essence))
    got = LeanProgressStorage().clear(essence=given)
    assert got == wanted
    assert given == essence  # never cleared in place
