"""The controller's kopf storages: the essence kopf's default storage computes, without copying status (and none for
kinds without change handlers); progress records cleared as kopf clears them."""

from __future__ import annotations

import json
from typing import Any, cast

import kopf
import pytest

from gpudra.config import ControllerSettings
from gpudra.controller.computedomains import CHANGE_HANDLED_KINDS
from gpudra.controller.diffbase import LeanDiffBaseStorage, LeanProgressStorage
from gpudra.controller.kopfapp import build_registry
from gpudra.kube import resources
from gpudra.kube.client import KubeClient
from gpudra.metrics import Metrics

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


def test_a_kind_without_change_handlers_gets_an_empty_essence_and_a_tracked_one_kopfs() -> None:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c"},
        "spec": {"a": 1},
    }
    domain = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain", "metadata": {"name": "d"},
              "spec": {"numNodes": 0}}  # fmt: skip
    storage = LeanDiffBaseStorage(tracked_kinds=CHANGE_HANDLED_KINDS)
    assert storage.build(body=kopf.Body(claim)) == {}
    assert storage.build(body=kopf.Body(domain)) == kopf.AnnotationsDiffBaseStorage().build(
        body=kopf.Body(domain)
    )


def test_the_tracked_kinds_are_those_of_the_controllers_change_handlers() -> None:
    """A change handler (create, update, resume, delete) on a kind left out of CHANGE_HANDLED_KINDS would never see
    a change: its essence would always be empty."""
    client = KubeClient.__new__(KubeClient)  # registering handlers calls no API
    registry = build_registry(ControllerSettings(), Metrics(), client)
    known = [
        kopf.Resource(r.group, r.version, r.plural, kind=r.kind, namespaced=r.namespaced)
        for r in vars(resources).values()
        if isinstance(r, resources.Resource)
    ]
    handlers = registry._changing.get_all_handlers()
    assert handlers  # the ComputeDomain handlers
    for handler in handlers:
        assert handler.selector is not None
        kinds = {r.kind for r in known if handler.selector.check(r)}
        assert kinds, f"{handler.id} watches a kind gpudra.kube.resources does not name"
        assert kinds <= CHANGE_HANDLED_KINDS, (
            f"{handler.id} handles changes of {kinds - CHANGE_HANDLED_KINDS}"
        )


DOMAIN = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
          "metadata": {"name": "d", "annotations": {"example.com/notes": "x"}}, "spec": {"numNodes": 0}}  # fmt: skip


def test_the_last_handled_spec_is_written_to_status_and_an_older_annotation_removed() -> None:
    """An object handled by an older controller keeps kopf's record in an annotation: it is read, and the next
    write moves it to status and removes the annotation (annotations are capped at 256 KiB together)."""
    legacy = kopf.AnnotationsDiffBaseStorage()
    storage = LeanDiffBaseStorage(tracked_kinds=CHANGE_HANDLED_KINDS)
    older = kopf.Patch()
    legacy.store(
        body=kopf.Body(DOMAIN), patch=older, essence=cast(kopf.BodyEssence, {"spec": {"numNodes": 1}})
    )
    body = json.loads(json.dumps(DOMAIN))
    body["metadata"]["annotations"].update(older["metadata"]["annotations"])

    assert storage.fetch(body=kopf.Body(body)) == {"spec": {"numNodes": 1}}
    assert storage.build(body=kopf.Body(body)) == storage.build(
        body=kopf.Body(DOMAIN)
    )  # not part of the essence

    patch = kopf.Patch()
    storage.store(
        body=kopf.Body(body), patch=patch, essence=cast(kopf.BodyEssence, {"spec": {"numNodes": 2}})
    )
    annotations = patch["metadata"]["annotations"]
    assert annotations and all(value is None for value in annotations.values())
    assert set(annotations) <= set(body["metadata"]["annotations"]) - {"example.com/notes"}
    stored = dict(body, status={"kopf": patch["status"]["kopf"]})
    stored["metadata"] = DOMAIN["metadata"]
    assert storage.fetch(body=kopf.Body(stored)) == {"spec": {"numNodes": 2}}


def test_progress_is_written_to_status_and_an_older_annotation_removed() -> None:
    legacy = kopf.AnnotationsProgressStorage()
    storage = LeanProgressStorage()
    key = kopf.HandlerId("ensure_children")
    older = kopf.Patch()
    legacy.store(key=key, record={"retries": 3}, body=kopf.Body(DOMAIN), patch=older)
    body = json.loads(json.dumps(DOMAIN))
    body["metadata"]["annotations"].update(older["metadata"]["annotations"])
    assert storage.fetch(key=key, body=kopf.Body(body)) == {"retries": 3}

    patch = kopf.Patch()
    storage.store(key=key, record={"retries": 4}, body=kopf.Body(body), patch=patch)
    storage.touch(body=kopf.Body(body), patch=patch, value="now")
    assert patch["status"]["kopf"] == {"progress": {"ensure_children": {"retries": 4}}, "dummy": "now"}
    assert all(value is None for value in patch["metadata"]["annotations"].values())
