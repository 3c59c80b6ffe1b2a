"""The web view's pending cards (the worker's pure ``explain_pending``): a claim whose pod waits is explained over
the nodes kube-scheduler's node filters let the pod go to, and the MIG planner's suggestion on its card is for
one of those."""

from __future__ import annotations

from typing import Any

from gpudra.cluster.fleet import parse_fleet
from gpudra.cluster.simslices import node_objects
from gpudra.controller.webview.pendingcards import explain_pending
from gpudra.devices.classes import load_device_classes

TAINT = {"key": "dedicated", "value": "train", "effect": "NoSchedule"}


def _objects(pods: list[dict[str, Any]], claim: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Two dgx-a100 nodes, the first tainted, with their slices; gpudra's classes; the pods and the claim."""
    nodes: list[dict[str, Any]] = []
    slices: list[dict[str, Any]] = []
    for fleet_node in parse_fleet("dgx-a100:2", {"dgx-a100"}):
        node, *published = node_objects(fleet_node)
        if fleet_node.fleet_index == 0:
            node["spec"] = {**(node.get("spec") or {}), "taints": [TAINT]}
        nodes.append(node)
        slices += published
    classes = [c.to_wire() for c in load_device_classes()]
    return {
        "nodes": nodes,
        "slices": slices,
        "classes": classes,
        "claims": [claim],
        "namespaces": [],
        "pods": pods,
    }


def _claim() -> dict[str, Any]:
    selector = {"cel": {"expression": 'device.attributes["gpu.nvidia.com"].profile == "7g.40gb"'}}
    request = {"name": "mig", "exactly": {"deviceClassName": "mig.nvidia.com", "selectors": [selector]}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": "big",
            "namespace": "default",
            "uid": "big-uid",
            "creationTimestamp": "2026-11-30T00:00:00Z",
        },
        "spec": {"devices": {"requests": [request]}},
    }


def _pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "default", "uid": "pod-uid"},
        "spec": {
            "resourceClaims": [{"name": "mig", "resourceClaimName": "big"}],
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }


def test_a_waiting_pods_claim_is_planned_and_explained_where_the_pod_may_go() -> None:
    claim = _claim()
    alone = explain_pending(_objects([], claim), [claim], "gpu.nvidia.com", 10, 37)["big-uid"]
    assert alone.headline.startswith("would fit on dgx-a100-0 if its MIG layout had a 7g.40gb free"), alone
    assert alone.kept_off == ()

    card = explain_pending(_objects([_pod()], claim), [claim], "gpu.nvidia.com", 10, 37)["big-uid"]

    assert card.headline.startswith("would fit on dgx-a100-1 if its MIG layout had a 7g.40gb free"), card
    assert card.kept_off == (("dgx-a100-0", "taint dedicated=train:NoSchedule not tolerated"),)


def test_each_claim_is_explained_over_the_nodes_its_own_pod_may_go_to() -> None:
    """Three waiting pods: two alike (a Job's), kept off the tainted node, and one that tolerates its taint. The
    pods alike share what keeps them off nodes; the tolerating one is explained over both nodes."""
    claims, pods = [], []
    for name, tolerations in (
        ("a", None),
        ("b", None),
        ("tolerant", [{"key": "dedicated", "operator": "Exists"}]),
    ):
        claim = _claim()
        claim["metadata"] = {**claim["metadata"], "name": name, "uid": f"{name}-uid"}
        pod = _pod()
        pod["metadata"] = {**pod["metadata"], "name": f"pod-{name}", "uid": f"pod-{name}-uid"}
        pod["spec"] = {**pod["spec"], "resourceClaims": [{"name": "mig", "resourceClaimName": name}]}
        if tolerations:
            pod["spec"]["tolerations"] = tolerations
        claims.append(claim)
        pods.append(pod)
    objects = {**_objects(pods, claims[0]), "claims": claims}

    cards = explain_pending(objects, claims, "gpu.nvidia.com", 10, 37)

    kept = (("dgx-a100-0", "taint dedicated=train:NoSchedule not tolerated"),)
    assert [cards[f"{n}-uid"].kept_off for n in ("a", "b", "tolerant")] == [kept, kept, ()]
