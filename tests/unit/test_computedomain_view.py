"""The controller's view of ComputeDomains: which events touch which domains, workload nodes from allocated
channel claims (daemon claims ignored), held nodes in daemonset mode, and a late watch echo ignored."""

from __future__ import annotations

from typing import Any

import pytest

from domainviewkit import C1, claim, clique, domain, node
from gpudra.api.core import Pod
from gpudra.computedomain.names import OBJECT_LABEL
from gpudra.computedomain.view import DomainView


def test_workload_nodes_come_from_allocated_channel_claims_only() -> None:
    view = DomainView()
    view.domain_changed(domain("a", "uid-a"), "uid-a")
    assert view.claim_changed(claim("uid-a", None), "c0") == set()  # not allocated yet
    assert view.claim_changed(claim("uid-a", "n1"), "c0") == {"uid-a"}
    assert view.claim_changed(claim("uid-a", "n1"), "c0") == set()  # same again: nothing to do
    assert view.claim_changed(claim("uid-a", "n2", "compute-domain-daemon.nvidia.com"), "c1") == set()
    assert view.workload_nodes("uid-a") == {"n1"}
    assert view.claim_changed(None, "c0") == {"uid-a"}
    assert view.workload_nodes("uid-a") == set()


def test_a_node_event_touches_the_domains_on_it_only_when_its_clique_changes() -> None:
    view = DomainView(mode="host-managed")
    view.domain_changed(domain("a", "uid-a"), "uid-a")
    view.claim_changed(claim("uid-a", "n1"), "c0")
    assert view.node_changed(node("n1", C1), "n1") == {"uid-a"}
    assert view.node_changed(node("n2", C1), "n2") == set()
    assert view.node_changed(node("n1", C1, "uid-a"), "n1") == set()  # a domain label: no matter here
    assert view.node_changed(node("n1", None, "uid-a"), "n1") == {"uid-a"}  # fabric lost
    assert view.node_changed(None, "n1") == {"uid-a"}


def test_daemonset_mode_holds_a_node_for_the_domain_labelled_there() -> None:
    view = DomainView(mode="daemonset")
    view.domain_changed(domain("a", "uid-a"), "uid-a")
    view.domain_changed(domain("b", "uid-b"), "uid-b")
    view.node_changed(node("n1", C1, "uid-a"), "n1")
    view.clique_changed(clique("uid-a", "n1"), "gpudra/a")
    view.claim_changed(claim("uid-a", "n1"), "ca")
    view.claim_changed(claim("uid-b", "n1"), "cb")

    status = view.status_of("uid-b", "2026-01-01T00:00:00Z")
    assert status is not None and not status.ready
    assert [(p.node_name, p.reason) for p in status.problems] == [("n1", "NodeHeld")]
    assert "team/a" in status.problems[0].message
    first = view.status_of("uid-a", "2026-01-01T00:00:00Z")
    assert first is not None and first.ready

    shared = DomainView(mode="host-managed")
    shared.domain_changed(domain("b", "uid-b"), "uid-b")
    shared.node_changed(node("n1", C1, "uid-a"), "n1")
    shared.claim_changed(claim("uid-b", "n1"), "cb")
    assert shared.held_nodes("uid-b", {"n1"}) == {}


def test_a_late_echo_of_an_older_version_is_ignored() -> None:
    view = DomainView()
    assert view.domain_changed(domain("a", "uid-a", "7"), "uid-a") == {"uid-a"}
    assert view.domain_changed(domain("a", "uid-a", "5"), "uid-a") == set()
    assert view.domains["uid-a"].metadata.resource_version == "7"


def test_clique_objects_map_to_their_domain_by_name() -> None:
    view = DomainView()
    assert view.clique_changed(clique("uid-a", "n1", "n2"), "gpudra/x") == {"uid-a"}
    assert [d.node_name for d in view.daemons("uid-a")] == ["n1", "n2"]
    assert view.clique_changed(None, "gpudra/x") == {"uid-a"}
    assert view.daemons("uid-a") == []


def daemon_pod(status: dict[str, Any], *, node: str = "n1", bound: bool = False) -> Pod:
    spec: dict[str, Any] = {"nodeName": node} if bound else {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}}  # fmt: skip
    meta = {"name": "cd-daemon-x", "namespace": "gpudra", "labels": {OBJECT_LABEL: "uid-a"}}
    return Pod.model_validate({"metadata": meta, "spec": spec, "status": status})


WAITING = {"phase": "Pending", "containerStatuses": [{"name": "imex", "restartCount": 0, "state": {
    "waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"imex:bad\""}}}]}  # fmt: skip
CRASHING = {"phase": "Running", "containerStatuses": [{"name": "imex", "restartCount": 4, "state": {
    "terminated": {"reason": "Error", "exitCode": 1}}}]}  # fmt: skip
UNSCHEDULED = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
    "reason": "Unschedulable", "message": "0/4 nodes are available: 1 Insufficient memory"}]}  # fmt: skip


@pytest.mark.parametrize(
    ("pod", "says"),
    [
        (
            daemon_pod(WAITING),
            'is Pending (container imex waiting: ImagePullBackOff: Back-off pulling image "imex:bad")',
        ),
        (
            daemon_pod(CRASHING, bound=True),
            "is Running (container imex terminated: Error (exit code 1); restarted 4 times)",
        ),
        (
            daemon_pod(UNSCHEDULED),
            "is Pending (not scheduled: 0/4 nodes are available: 1 Insufficient memory)",
        ),
        (daemon_pod({"phase": "Running"}, bound=True), "is Running"),
    ],
)
def test_a_daemon_pod_says_why_its_daemon_has_not_started(pod: Pod, says: str) -> None:
    view = DomainView()
    view.domain_changed(domain("a", "uid-a"), "uid-a")
    view.node_changed(node("n1", C1), "n1")
    view.claim_changed(claim("uid-a", "n1"), "c0")
    assert view.daemon_pod_changed(pod, "gpudra/cd-daemon-x") == {"uid-a"}
    status = view.status_of("uid-a", "2026-01-01T00:00:00Z")
    assert status is not None
    (problem,) = status.problems
    assert problem.reason == "DaemonNotStarted"
    assert problem.message.endswith(f"its daemon pod gpudra/cd-daemon-x {says}"), problem.message
    assert view.daemon_pod_changed(None, "gpudra/cd-daemon-x") == {"uid-a"}
    assert "daemon pod" not in (view.status_of("uid-a", "2026-01-01T00:00:00Z") or status).problems[0].message
