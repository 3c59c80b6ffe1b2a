"""kube-scheduler's filters as the stand-in scheduler applies them: tables of pods and nodes."""

from __future__ import annotations

from collections import Counter
from typing import Any, cast

import pytest

from gpudra.allocator.pools import NodeInfo
from gpudra.cluster.controlplane import predicates as p
from gpudra.cluster.controlplane.filtering import NodeFilter
from gpudra.cluster.controlplane.state import ClusterState
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.planning import podnodes as pn


def node(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "3"}},
    }


def pod(labels: dict[str, str] | None = None, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": namespace, "labels": labels or {}}, "spec": spec}


def term(key: str, operator: str, *values: str) -> dict[str, Any]:
    return (
        {"key": key, "operator": operator, "values": list(values)}
        if values
        else {"key": key, "operator": operator}
    )


def required_node_affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
    }


ZONE_A = node("n1", {"zone": "a", "gpus": "8"})


@pytest.mark.parametrize(
    ("spec", "passes"),
    [
        ({}, True),
        ({"nodeSelector": {"zone": "a"}}, True),
        ({"nodeSelector": {"zone": "b"}}, False),
        ({"affinity": required_node_affinity({"matchExpressions": [term("zone", "In", "a", "b")]})}, True),
        ({"affinity": required_node_affinity({"matchExpressions": [term("zone", "NotIn", "a")]})}, False),
        ({"affinity": required_node_affinity({"matchExpressions": [term("rack", "DoesNotExist")]})}, True),
        ({"affinity": required_node_affinity({"matchExpressions": [term("rack", "Exists")]},
                                             {"matchExpressions": [term("zone", "Exists")]})}, True),  # terms are ORed
        ({"affinity": required_node_affinity({"matchExpressions": [term("gpus", "Gt", "4")]})}, True),
        ({"affinity": required_node_affinity({"matchExpressions": [term("gpus", "Lt", "4")]})}, False),
        ({"affinity": required_node_affinity({"matchFields": [term("metadata.name", "In", "n1")]})}, True),
        ({"affinity": required_node_affinity({"matchFields": [term("metadata.name", "In", "n2")]})}, False),
        ({"affinity": required_node_affinity({})}, False),  # an empty term matches nothing
    ],
)  # fmt: skip
def test_node_selector_and_required_node_affinity(spec: dict[str, Any], passes: bool) -> None:
    assert (pn.node_affinity(pod(**spec), ZONE_A) is None) is passes


TAINTED = node("n1", taints=[{"key": "gpu", "value": "h100", "effect": "NoSchedule"},
                             {"key": "soft", "effect": "PreferNoSchedule"}])  # fmt: skip


@pytest.mark.parametrize(
    ("tolerations", "reason"),
    [
        ([], pn.UNTOLERATED),
        ([{"key": "gpu", "operator": "Equal", "value": "h100"}], None),
        ([{"key": "gpu", "operator": "Equal", "value": "a100"}], pn.UNTOLERATED),
        ([{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}], None),
        (
            [{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}],
            pn.UNTOLERATED,
        ),
        ([{"operator": "Exists"}], None),  # tolerates everything
    ],
)
def test_taints_and_tolerations(tolerations: list[dict[str, Any]], reason: str | None) -> None:
    assert pn.taints(pod(tolerations=tolerations), TAINTED) == reason


def test_a_cordoned_node_takes_only_pods_that_tolerate_it() -> None:
    cordoned = node("n1", unschedulable=True)
    assert pn.taints(pod(), cordoned) == pn.UNSCHEDULABLE
    tolerating = pod(
        tolerations=[{"key": pn.UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    )
    assert pn.taints(tolerating, cordoned) is None


def container(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict[str, Any]:
    return {"name": "c", "resources": {"requests": requests or {}, "limits": limits or {}}}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"containers": [container({"cpu": "500m"}), container({"cpu": "1", "memory": "1Gi"})]},
         {"cpu": 1500, "memory": 2**30, "pods": 1}),
        ({"containers": [container(limits={"cpu": "2"})]}, {"cpu": 2000, "pods": 1}),  # limits stand in for requests
        ({"containers": [container({"cpu": "1"})],
          "initContainers": [container({"cpu": "3"}), container({"cpu": "2"})]},
         {"cpu": 3000, "pods": 1}),  # init containers by their largest
        ({"containers": [container({"cpu": "1"})], "overhead": {"cpu": "250m"}}, {"cpu": 1250, "pods": 1}),
        ({"containers": [container(limits={"nvidia.com/gpu": "4"})]}, {"pods": 1}),  # served by DRA: ignored
    ],
)  # fmt: skip
def test_pod_requests(spec: dict[str, Any], expected: dict[str, int]) -> None:
    assert p.pod_requests(pod(**spec), ignore={"nvidia.com/gpu"}) == expected


def test_resources_against_what_is_left_on_the_node() -> None:
    free = {"cpu": 1000, "memory": 2**30, "pods": 1}
    assert p.resources({"cpu": 1000, "pods": 1}, free) == []
    assert p.resources({"cpu": 1500, "memory": 2**31, "pods": 1}, free) == [
        "Insufficient cpu",
        "Insufficient memory",
    ]
    assert p.resources({"pods": 1}, {**free, "pods": 0}) == ["Too many pods"]
    assert p.resources({"example.com/fpga": 1, "pods": 1}, free) == ["Insufficient example.com/fpga"]
    assert p.allocatable(node("n")) == {"cpu": 4000, "memory": 8 * 2**30, "pods": 3}


TRAYS = {
    f"t{i}": {"kubernetes.io/hostname": f"t{i}", "nvidia.com/gpu.clique": "A" if i < 2 else "B"}
    for i in range(4)
}


def tray(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": TRAYS[name]}}


def workers(*, affinity: str = "", anti: str = "") -> dict[str, Any]:
    selector = {"labelSelector": {"matchLabels": {"app": "train"}}}
    spec: dict[str, Any] = {}
    if affinity:
        spec["podAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [{**selector, "topologyKey": affinity}]
        }
    if anti:
        spec["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [{**selector, "topologyKey": anti}]
        }
    return pod({"app": "train"}, affinity=spec)


def view(*placed: tuple[str, dict[str, Any]]) -> p.AffinityView:
    return p.AffinityView([p.placed(body, where) for where, body in placed], TRAYS)


@pytest.mark.parametrize(
    ("incoming", "placed", "candidate", "reason"),
    [
        # one pod per tray: anti-affinity on the hostname
        (workers(anti="kubernetes.io/hostname"), [("t0", workers())], "t0", p.ANTI_AFFINITY),
        (workers(anti="kubernetes.io/hostname"), [("t0", workers())], "t1", None),
        # all in one rack: affinity on the NVLink clique
        (workers(affinity="nvidia.com/gpu.clique"), [("t0", workers())], "t1", None),
        (workers(affinity="nvidia.com/gpu.clique"), [("t0", workers())], "t2", p.AFFINITY),
        # the first pod of a group that matches its own term goes anywhere
        (workers(affinity="nvidia.com/gpu.clique"), [], "t3", None),
        # ... but a pod whose term selects other pods waits for them
        (pod({"app": "client"}, affinity=workers(affinity="nvidia.com/gpu.clique")["spec"]["affinity"]), [], "t0",
         p.AFFINITY),
        # both, as NVIDIA's examples write it
        (workers(affinity="nvidia.com/gpu.clique", anti="kubernetes.io/hostname"), [("t0", workers())], "t1", None),
        (workers(affinity="nvidia.com/gpu.clique", anti="kubernetes.io/hostname"), [("t0", workers())], "t0",
         p.ANTI_AFFINITY),
        # a placed pod's anti-affinity keeps matching pods away from its domain
        (pod({"app": "train"}), [("t0", workers(anti="nvidia.com/gpu.clique"))], "t1", p.EXISTING_ANTI_AFFINITY),
        (pod({"app": "train"}), [("t0", workers(anti="nvidia.com/gpu.clique"))], "t2", None),
        # terms look in the pod's own namespace unless they name others
        (workers(anti="kubernetes.io/hostname"), [("t0", pod({"app": "train"}, namespace="other"))], "t0", None),
    ],
)  # fmt: skip
def test_inter_pod_affinity(
    incoming: dict[str, Any], placed: list[tuple[str, dict[str, Any]]], candidate: str, reason: str | None
) -> None:
    assert p.inter_pod_affinity(incoming, tray(candidate), view(*placed)) == reason


def test_match_label_keys_narrow_a_term_to_the_pods_of_the_same_group() -> None:
    term_ = {"labelSelector": {"matchLabels": {"app": "train"}}, "matchLabelKeys": ["job"],
             "topologyKey": "kubernetes.io/hostname"}  # fmt: skip
    incoming = pod({"app": "train", "job": "b"}, affinity={"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [term_]}})  # fmt: skip
    other_job = pod({"app": "train", "job": "a"})
    same_job = pod({"app": "train", "job": "b"})
    assert p.inter_pod_affinity(incoming, tray("t0"), view(("t0", other_job))) is None
    assert p.inter_pod_affinity(incoming, tray("t0"), view(("t0", same_job))) == p.ANTI_AFFINITY


def test_the_failure_message_is_kube_schedulers() -> None:
    """As kube-scheduler v1.34.4 wrote it for a pod with anti-affinity next to two tainted nodes (its preemption
    sentence after the period aside: the stand-in does not preempt)."""
    reasons = Counter({pn.UNTOLERATED: 2, p.ANTI_AFFINITY: 1})
    assert p.unschedulable_message(3, reasons) == (
        "0/3 nodes are available: 1 node(s) didn't match pod anti-affinity rules, 2 node(s) had untolerated taint(s)."
    )


def test_what_is_not_implemented_is_named_by_its_field() -> None:
    spec: dict[str, Any] = {
        "topologySpreadConstraints": [{"maxSkew": 1}],
        "affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]}},
        "priorityClassName": "high",
    }
    assert [field for field, _ in p.unsupported(pod(**spec))] == [
        "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution",
        "spec.topologySpreadConstraints",
        "spec.priorityClassName",
    ]
    assert (
        p.unsupported(
            pod(priorityClassName="system-node-critical"), known_priority_classes=["system-node-critical"]
        )
        == []
    )


# ---- the filter over the control plane's caches --------------------------------------------------------------
def filter_with(*nodes: dict[str, Any]) -> NodeFilter:
    state = ClusterState(cast(KubeClient, object()))
    for body in nodes:
        state.nodes.cache[("", body["metadata"]["name"])] = {
            "status": {"allocatable": {"pods": "110"}},
            **body,
        }
    return NodeFilter(state, cast(EventRecorder, object()))


def bound(name: str, where: str = "", **spec: Any) -> dict[str, Any]:
    body = pod({"app": "train"}, **spec)
    body["metadata"].update(name=name, uid=f"uid-{name}")
    body["spec"]["nodeName"] = where
    return body


def test_an_assumed_binding_outlives_older_events_of_the_pod() -> None:
    """The scheduler counts its binding at once; an event of the pod from before the binding must not undo it."""
    nodes = [NodeInfo("t0"), NodeInfo("t1")]
    spread = workers(anti="kubernetes.io/hostname")
    check = filter_with(tray("t0"), tray("t1"))
    first = bound("w0", **spread["spec"])
    check.assume(first, "t0")
    check.pod_event("MODIFIED", {**first, "spec": {**first["spec"], "nodeName": ""}})
    assert check.load("t0") == 1
    verdict = check.feasible(spread, nodes)
    assert [n.name for n in verdict.nodes] == ["t1"]
    check.pod_event("MODIFIED", {**first, "status": {"phase": "Succeeded"}})
    assert check.load("t0") == 0
    assert (
        check.feasible(spread, nodes).nodes
        is check.feasible(workers(anti="kubernetes.io/hostname"), nodes).nodes
    )


def test_no_node_left_tells_every_reason() -> None:
    full = {**tray("t0"), "status": {"allocatable": {"pods": "1"}}}
    tainted = {
        **tray("t1"),
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": full["status"],
    }
    check = filter_with(full, tainted)
    check.assume(bound("other", "t0"), "t0")
    verdict = check.feasible(pod(), [NodeInfo("t0"), NodeInfo("t1")])
    assert verdict.nodes == []
    assert (
        verdict.message() == "0/2 nodes are available: 1 Too many pods, 1 node(s) had untolerated taint(s)."
    )
