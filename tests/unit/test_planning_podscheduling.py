"""A pod held by scheduling gates: what `gpudra explain pod` and the web view's card say before whether its claims
fit (kube-scheduler does not look at such a pod)."""

from __future__ import annotations

from typing import Any

from gpudra.allocator import Explanation, Failure
from gpudra.api.core import Pod
from gpudra.api.dra import ResourceClaim
from gpudra.api.meta import ObjectMeta
from gpudra.cli.explainoutput import PodNotes
from gpudra.planning.podscheduling import Unschedulable, gate_words, scheduling_gates, unschedulable
from gpudra.planning.workloads import pending_card

HELD = (
    "the pod is held by its scheduling gates (example.com/budget): kube-scheduler neither places it nor allocates"
    " its claims until every gate is removed"
)


def _pod(**spec: Any) -> Pod:
    return Pod.model_validate({"metadata": {"name": "p", "namespace": "team"}, "spec": spec})


def test_a_pods_gates_until_it_is_bound() -> None:
    gated = _pod(schedulingGates=[{"name": "example.com/budget"}, {"name": "kueue.x-k8s.io/admission"}])
    assert scheduling_gates(gated) == ("example.com/budget", "kueue.x-k8s.io/admission")
    assert scheduling_gates(_pod()) == ()
    assert scheduling_gates(_pod(nodeName="n1", schedulingGates=[{"name": "late"}])) == ()


def test_kueues_gate_says_where_to_look() -> None:
    assert gate_words(("example.com/budget",), "team") == [HELD]
    words = gate_words(("kueue.x-k8s.io/admission",), "team")
    assert len(words) == 2 and "kubectl get workloads -n team" in words[1]


def test_the_web_views_card_says_the_gates_first() -> None:
    claim = ResourceClaim(metadata=ObjectMeta(name="c", namespace="team"))
    fits = pending_card(claim, "n1", gates=("example.com/budget",))
    assert fits.headline == f"fits on node n1 now; {HELD}" and fits.sentences == ()
    assert pending_card(claim, "n1").headline.endswith(
        "waiting for the scheduler (or for a pod that uses it)"
    )
    failed = Explanation("DevicesInUse", "all in use", ("held by team/other",), (), (), Failure("c", "x"))
    card = pending_card(claim, failed, gates=("example.com/budget",))
    assert card.headline == "all in use" and card.sentences == (HELD, "held by team/other")


def test_kube_schedulers_word_is_its_unschedulable_condition_until_the_pod_is_bound() -> None:
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient cpu.",
        "lastTransitionTime": "2026-11-30T10:00:00Z",
    }
    pod = Pod.model_validate({"metadata": {"name": "p"}, "spec": {}, "status": {"conditions": [condition]}})
    said = unschedulable(pod)
    assert said is not None and said.words() == (
        "kube-scheduler could not place the pod (since 2026-11-30T10:00:00Z): 0/3 nodes are available: 3"
        " Insufficient cpu."
    )
    notes = PodNotes(unschedulable=said)
    assert [str(t) for t in notes.tail()] == [said.words()]
    assert notes.data() == {
        "unschedulable": {"message": condition["message"], "since": condition["lastTransitionTime"]}
    }
    gated = {**condition, "reason": "SchedulingGated"}
    assert (
        unschedulable(Pod.model_validate({"metadata": {}, "spec": {}, "status": {"conditions": [gated]}}))
        is None
    )
    bound = {"metadata": {}, "spec": {"nodeName": "n1"}, "status": {"conditions": [condition]}}
    assert unschedulable(Pod.model_validate(bound)) is None


def test_the_web_views_card_of_a_claim_that_fits_gives_kube_schedulers_word_unless_gates_hold_the_pod() -> (
    None
):
    claim = ResourceClaim(metadata=ObjectMeta(name="c", namespace="team"))
    stuck = Unschedulable("0/1 nodes are available: 1 Insufficient cpu.", "2026-11-30T10:00:00Z")
    assert pending_card(claim, "n1", stuck=stuck).headline == f"fits on node n1 now; {stuck.words()}"
    held = pending_card(claim, "n1", gates=("example.com/budget",), stuck=stuck)
    assert held.headline == f"fits on node n1 now; {HELD}"
