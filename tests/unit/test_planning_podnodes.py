"""What keeps a pod off a node before any claim is allocated, in the words `gpudra explain pod` prints, and how
many of those it names by default."""

from __future__ import annotations

from typing import Any

from gpudra.cli.explainoutput import PodNotes
from gpudra.planning.podnodes import UNSCHEDULABLE_TAINT, filters_of, kept_off, kept_off_sentence


def _node(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def _pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": spec}


NODES = [
    _node("cordoned", unschedulable=True),
    _node("valued", taints=[{"key": "dedicated", "value": "train", "effect": "NoSchedule"}]),
    _node("evicting", taints=[{"key": "nvidia.com/gpu", "effect": "NoExecute"}]),
    _node("preferred", {"pool": "a"}, taints=[{"key": "soft", "effect": "PreferNoSchedule"}]),
    _node("other-pool", {"pool": "b"}),
]


def test_each_node_says_what_keeps_the_pod_off_it_in_kube_schedulers_plugin_order() -> None:
    selected = _pod(nodeSelector={"pool": "a"})
    assert (
        kept_off(selected, NODES)
        == {
            "cordoned": "cordoned (spec.unschedulable)",  # a cordon before the selector, as kube-scheduler orders them
            "valued": "taint dedicated=train:NoSchedule not tolerated",
            "evicting": "taint nvidia.com/gpu:NoExecute not tolerated",
            "other-pool": "does not match the pod's nodeSelector pool=a",
        }
    )  # a PreferNoSchedule taint is only a preference


def test_tolerations_and_required_affinity() -> None:
    tolerant = _pod(
        tolerations=[
            {"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "operator": "Equal", "value": "train"},
            {"key": "nvidia.com/gpu", "operator": "Exists"},
        ],
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["b"]}]}
                    ]
                }
            }
        },
    )
    assert kept_off(tolerant, NODES) == {"other-pool": "does not match the pod's required node affinity"}
    assert kept_off(_pod(tolerations=[{"operator": "Exists"}]), NODES) == {}


def test_the_default_output_names_five_nodes_and_says_how_many_more() -> None:
    notes = PodNotes(
        nodes=8, kept_off={f"n{i}": "does not match the pod's nodeSelector pool=a" for i in range(7)}
    )
    lines = [str(line) for line in notes.head()]
    assert lines[0] == "kube-scheduler's node filters keep the pod off 7 of 8 nodes with devices:"
    assert lines[1:6] == [f"  n{i}: does not match the pod's nodeSelector pool=a" for i in range(5)]
    assert lines[6:] == ["  and 2 more: -o wide"]
    assert len(notes.head(limit=None)) == 8
    everywhere = PodNotes(nodes=1, kept_off={"n0": "cordoned (spec.unschedulable)"})
    assert (
        str(everywhere.head()[0])
        == "kube-scheduler's node filters keep the pod off the only node with devices:"
    )
    assert everywhere.data() == {"keptOff": [{"node": "n0", "reason": "cordoned (spec.unschedulable)"}]}
    assert PodNotes().head() == [] and PodNotes().data() == {}


def test_an_events_sentence_names_five_nodes_and_counts_the_rest() -> None:
    kept = {f"n{i}": "cordoned (spec.unschedulable)" for i in range(7)}
    assert kept_off_sentence(kept, 9) == (
        "kube-scheduler's node filters keep the pod off 7 of 9 nodes with devices: "
        + "; ".join(f"n{i}: cordoned (spec.unschedulable)" for i in range(5))
        + "; and 2 more"
    )
    assert kept_off_sentence({"n0": "cordoned (spec.unschedulable)"}, 1).startswith(
        "kube-scheduler's node filters keep the pod off the only node with devices: n0"
    )


def test_pods_alike_in_what_the_node_filters_read_have_the_same_filters() -> None:
    affinity: dict[str, Any] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}
    }
    pod = _pod(
        nodeSelector={"pool": "a"}, affinity={**affinity, "podAntiAffinity": {}}, restartPolicy="Never"
    )
    assert filters_of(pod) == {"spec": {"nodeSelector": {"pool": "a"}, "affinity": affinity}}
    assert kept_off(filters_of(pod), NODES) == kept_off(pod, NODES)
    assert filters_of(_pod(containers=[])) == {"spec": {}}
