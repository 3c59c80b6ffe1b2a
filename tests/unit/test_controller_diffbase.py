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
from gpudra.controller.kopfapp import build_controller
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
    wanted = kopf.AnnotationsDiffBaseStorage().build(body=as_body(body), extra_fields=extra)
    got = LeanDiffBaseStorage().build(body=as_body(body), extra_fields=extra)
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
    assert storage.build(body=as_body(claim)) == {}
    assert storage.build(body=as_body(domain)) == kopf.AnnotationsDiffBaseStorage().build(
        body=as_body(domain)
    )


def test_the_tracked_kinds_are_those_of_the_controllers_change_handlers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A change handler (create, update, resume, delete) on a kind left out of CHANGE_HANDLED_KINDS would never see
    a change: its essence would always be empty. The handlers are seen as they are declared (kopf's public
    decorators), not in kopf's registry."""
    declared: list[tuple[str, ...]] = []
    for cause in ("create", "update", "resume", "delete", "field"):
        decorator = getattr(kopf.on, cause)

        def recording(*args: str, _decorator: Any = decorator, **kwargs: Any) -> Any:
            declared.append(args)
            return _decorator(*args, **kwargs)

        monkeypatch.setattr(kopf.on, cause, recording)
    client = KubeClient.__new__(KubeClient)  # registering handlers calls no API
    build_controller(ControllerSettings(), Metrics(), client)
    known = [r for r in vars(resources).values() if isinstance(r, resources.Resource)]
    assert declared  # the ComputeDomain handlers
    for args in declared:
        group = args[0] if len(args) == 3 else ""
        kinds = {r.kind for r in known if (r.group, r.plural) == (group, args[-1])}
        assert kinds, f"a change handler on {args} watches a kind gpudra.kube.resources does not name"
        assert kinds <= CHANGE_HANDLED_KINDS, (
            f"a change handler on {args} handles {kinds - CHANGE_HANDLED_KINDS}"
        )


DOMAIN = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
          "metadata": {"name": "d", "annotations": {"example.com/notes": "x"}}, "spec": {"numNodes": 0}}  # fmt: skip


def test_the_last_handled_spec_is_written_to_status_and_an_older_annotation_removed() -> None:
    """An object handled by an older controller keeps kopf's record in an annotation: it is read, and the next
    write moves it to status and removes the annotation (annotations are capped at 256 KiB together)."""
    legacy = kopf.AnnotationsDiffBaseStorage()
    storage = LeanDiffBaseStorage(tracked_kinds=CHANGE_HANDLED_KINDS)
    older = kopf.Patch()
    legacy.store(body=as_body(DOMAIN), patch=older, essence=cast(kopf.BodyEssence, {"spec": {"numNodes": 1}}))
    body = json.loads(json.dumps(DOMAIN))
    body["metadata"]["annotations"].update(older["metadata"]["annotations"])

    assert storage.fetch(body=as_body(body)) == {"spec": {"numNodes": 1}}
    assert storage.build(body=as_body(body)) == storage.build(body=as_body(DOMAIN))  # not part of the essence

    patch = kopf.Patch()
    storage.store(body=as_body(body), patch=patch, essence=cast(kopf.BodyEssence, {"spec": {"numNodes": 2}}))
    annotations = patch["metadata"]["annotations"]
    assert annotations and all(value is None for value in annotations.values())
    assert set(annotations) <= set(body["metadata"]["annotations"]) - {"example.com/notes"}
    stored = dict(body, status={"kopf": patch["status"]["kopf"]})
    stored["metadata"] = DOMAIN["metadata"]
    assert storage.fetch(body=as_body(stored)) == {"spec": {"numNodes": 2}}


def test_progress_is_written_to_status_and_an_older_annotation_removed() -> None:
    legacy = kopf.AnnotationsProgressStorage()
    storage = LeanProgressStorage()
    key = kopf.HandlerId("ensure_children")
    older = kopf.Patch()
    legacy.store(key=key, record={"retries": 3}, body=as_body(DOMAIN), patch=older)
    body = json.loads(json.dumps(DOMAIN))
    body["metadata"]["annotations"].update(older["metadata"]["annotations"])
    assert storage.fetch(key=key, body=as_body(body)) == {"retries": 3}

    patch = kopf.Patch()
    storage.store(key=key, record={"retries": 4}, body=as_body(body), patch=patch)
    storage.touch(body=as_body(body), patch=patch, value="now")
    assert patch["status"]["kopf"] == {"progress": {"ensure_children": {"retries": 4}}, "dummy": "now"}
    assert all(value is None for value in patch["metadata"]["annotations"].values())


def as_body(raw: dict[str, Any]) -> kopf.Body:
    """kopf's view of an object, as kopf hands it to a handler."""
    return kopf.Body(cast(kopf.RawBody, raw))
