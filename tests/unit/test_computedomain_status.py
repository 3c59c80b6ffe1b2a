"""ComputeDomain status aggregation: nodes, Ready/NotReady, conditions naming what is missing, and patches."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.api.computedomain import ComputeDomain, ComputeDomainDaemonInfo
from gpudra.computedomain.status import DaemonReport, aggregate_status, status_patch

C1 = "cluster-1.1"
C2 = "cluster-1.2"
NOW = "2026-01-01T00:00:00Z"
LATER = "2026-01-01T00:05:00Z"


def domain(num_nodes: int = 0) -> ComputeDomain:
    return ComputeDomain.from_wire(
        {
            "metadata": {"name": "train", "namespace": "team", "uid": "uid-a", "generation": 3},
            "spec": {"numNodes": num_nodes, "channel": {"resourceClaimTemplate": {"name": "train-channel"}}},
        }
    )


def ready(node: str, index: int, clique: str = C1) -> DaemonReport:
    return DaemonReport(node, f"10.0.0.{index}", clique, index, "Ready")


def not_ready(node: str, index: int, message: str = "", clique: str = C1) -> DaemonReport:
    return DaemonReport(node, f"10.0.0.{index}", clique, index, "NotReady", message)


def run(
    *,
    workload: list[str],
    daemons: list[DaemonReport],
    cliques: dict[str, str],
    num_nodes: int = 0,
) -> Any:
    return aggregate_status(
        domain(num_nodes), workload_nodes=workload, daemons=daemons, node_cliques=cliques, now=NOW
    )


# name, inputs, expected status.status, Ready reason, words the Ready message must hold
CASES: list[tuple[str, dict[str, Any], str, str, list[str]]] = [
    (
        "all ready",
        {
            "workload": ["n1", "n2"],
            "daemons": [ready("n1", 0), ready("n2", 1)],
            "cliques": {"n1": C1, "n2": C1},
        },
        "Ready",
        "AllNodesReady",
        ["all 2 nodes ready"],
    ),
    (
        "one daemon not ready, named with its message",
        {
            "workload": ["n1", "n2"],
            "daemons": [ready("n1", 0), not_ready("n2", 1, "waiting for quorum")],
            "cliques": {"n1": C1, "n2": C1},
        },
        "NotReady",
        "NodesNotReady",
        ["1 of 2 nodes not ready", "n2", "waiting for quorum"],
    ),
    (
        "daemon not started where a workload runs",
        {"workload": ["n1", "n2"], "daemons": [ready("n1", 0)], "cliques": {"n1": C1, "n2": C1}},
        "NotReady",
        "NodesNotReady",
        ["n2", "no IMEX daemon of this domain has started"],
    ),
    (
        "fewer nodes than numNodes",
        {"workload": ["n1"], "daemons": [ready("n1", 0)], "cliques": {"n1": C1}, "num_nodes": 3},
        "NotReady",
        "WaitingForNodes",
        ["1 of numNodes 3"],
    ),
    (
        "numNodes reached",
        {
            "workload": ["n1", "n2"],
            "daemons": [ready("n1", 0), ready("n2", 1)],
            "cliques": {"n1": C1, "n2": C1},
            "num_nodes": 2,
        },
        "Ready",
        "AllNodesReady",
        [],
    ),
    (
        "numNodes 0 takes any count, none included",
        {"workload": [], "daemons": [], "cliques": {}},
        "Ready",
        "NoNodes",
        ["no workload scheduled yet"],
    ),
    (
        "node loss: Node object deleted",
        {"workload": ["n1", "n2"], "daemons": [ready("n1", 0), ready("n2", 1)], "cliques": {"n1": C1}},
        "NotReady",
        "NodesNotReady",
        ["n2", "node is gone"],
    ),
    (
        "fabric lost",
        {
            "workload": ["n1", "n2"],
            "daemons": [ready("n1", 0), ready("n2", 1)],
            "cliques": {"n1": C1, "n2": ""},
        },
        "NotReady",
        "NodesNotReady",
        ["NVLink fabric lost", "n2", "1 of 2 nodes not ready"],
    ),
    (
        "clique mismatch names nodes and cliques",
        {
            "workload": ["n1", "n2", "n3"],
            "daemons": [ready("n1", 0), ready("n2", 1), ready("n3", 0, clique=C2)],
            "cliques": {"n1": C1, "n2": C1, "n3": C2},
        },
        "NotReady",
        "CliqueMismatch",
        [f"{C1}: n1, n2", f"{C2}: n3", "not in one NVLink clique"],
    ),
    (
        "single node without a clique is fine",
        {
            "workload": ["n1"],
            "daemons": [DaemonReport("n1", "10.0.0.1", "", 0, "Ready")],
            "cliques": {"n1": ""},
        },
        "Ready",
        "AllNodesReady",
        [],
    ),
    (
        "node moved to another clique",
        {"workload": ["n1"], "daemons": [ready("n1", 0)], "cliques": {"n1": C2}},
        "NotReady",
        "NodesNotReady",
        [f"reports clique {C2}", f"registered in {C1}"],
    ),
]


@pytest.mark.parametrize(("name", "inputs", "state", "reason", "words"), CASES, ids=[c[0] for c in CASES])
def test_status_aggregation(
    name: str, inputs: dict[str, Any], state: str, reason: str, words: list[str]
) -> None:
    result = run(**inputs)
    assert result.status.status == state, name
    ready_condition = result.condition("Ready")
    assert ready_condition.status == ("True" if state == "Ready" else "False")
    assert ready_condition.reason == reason
    for word in words:
        assert word in ready_condition.message, (word, ready_condition.message)
    assert ready_condition.observed_generation == 3


def test_nodes_list_carries_daemon_facts_sorted_by_name() -> None:
    result = run(
        workload=["n2", "n1", "n3"],
        daemons=[ready("n2", 1), not_ready("n1", 0)],
        cliques={"n1": C1, "n2": C1, "n3": C1},
    )
    assert result.to_wire(include_conditions=False) == {
        "status": "NotReady",
        "nodes": [
            {"name": "n1", "ipAddress": "10.0.0.0", "cliqueID": C1, "index": 0, "status": "NotReady"},
            {"name": "n2", "ipAddress": "10.0.0.1", "cliqueID": C1, "index": 1, "status": "Ready"},
            {"name": "n3", "ipAddress": "", "cliqueID": C1, "status": "NotReady"},
        ],
    }
    assert [p.reason for p in result.problems] == ["DaemonNotReady", "DaemonNotStarted"]
    assert result.condition("NodesReady").status == "False"
    assert result.condition("CliqueConsistent").status == "True"


def test_clique_object_entries_are_accepted_as_reports() -> None:
    info = ComputeDomainDaemonInfo.model_validate(
        {"nodeName": "n1", "ipAddress": "10.0.0.1", "cliqueID": C1, "index": 0, "status": "Ready"}
    )
    result = aggregate_status(
        domain(), workload_nodes=["n1"], daemons=[info], node_cliques={"n1": C1}, now=NOW
    )
    assert result.ready


# ---------------------------------------------------------------- patches


def test_no_change_gives_no_patch() -> None:
    inputs: dict[str, Any] = {
        "workload": ["n1", "n2"],
        "daemons": [ready("n1", 0), ready("n2", 1)],
        "cliques": {"n1": C1, "n2": C1},
    }
    first = run(**inputs)
    stored = first.to_wire()
    stored["nodes"].reverse()  # order on the server does not matter
    again = aggregate_status(
        domain(),
        workload_nodes=inputs["workload"],
        daemons=inputs["daemons"],
        node_cliques=inputs["cliques"],
        now=LATER,
        previous_conditions=first.conditions,
    )
    assert again.condition("Ready").last_transition_time == NOW  # carried over while unchanged
    assert status_patch(stored, again) is None
    assert status_patch(first.status, again.status) is None


def test_change_patches_only_what_changed() -> None:
    before = run(workload=["n1"], daemons=[ready("n1", 0)], cliques={"n1": C1})
    after = aggregate_status(
        domain(),
        workload_nodes=["n1"],
        daemons=[not_ready("n1", 0, "peer unreachable")],
        node_cliques={"n1": C1},
        now=LATER,
        previous_conditions=before.conditions,
    )
    patch = status_patch(before.to_wire(), after)
    assert patch is not None
    assert patch["status"]["status"] == "NotReady"
    assert patch["status"]["nodes"][0]["status"] == "NotReady"
    conditions = {c["type"]: c for c in patch["status"]["conditions"]}
    assert conditions["Ready"]["lastTransitionTime"] == LATER
    assert conditions["CliqueConsistent"]["lastTransitionTime"] == NOW


def test_first_write_patches_everything() -> None:
    result = run(workload=[], daemons=[], cliques={})
    assert status_patch(None, result) == {"status": result.to_wire()}


def test_without_conditions_a_stored_status_lacking_them_matches() -> None:
    result = run(workload=["n1"], daemons=[ready("n1", 0)], cliques={"n1": C1})
    stored = result.to_wire(include_conditions=False)
    assert status_patch(stored, result.to_wire(include_conditions=False)) is None


def test_a_domain_may_span_cliques_when_allowed_and_says_so() -> None:
    inputs: dict[str, Any] = {
        "workload_nodes": ["n1", "n2", "n3"],
        "daemons": [ready("n1", 0), ready("n2", 1), ready("n3", 0, clique=C2)],
        "node_cliques": {"n1": C1, "n2": C1, "n3": C2},
        "now": NOW,
    }
    strict = aggregate_status(domain(), **inputs)
    assert (strict.status.status, strict.condition("Ready").reason) == ("NotReady", "CliqueMismatch")

    spanning = aggregate_status(domain(), span_cliques=True, **inputs)
    assert spanning.ready
    assert spanning.condition("Ready").message == "all 3 nodes ready in 2 NVLink cliques"
    consistent = spanning.condition("CliqueConsistent")
    assert (consistent.status, consistent.reason) == ("False", "MultipleCliques")
    assert f"{C1}: n1, n2" in consistent.message and f"{C2}: n3" in consistent.message


def test_a_node_in_no_clique_blocks_even_a_spanning_domain() -> None:
    result = aggregate_status(
        domain(),
        workload_nodes=["n1", "n2"],
        daemons=[ready("n1", 0), DaemonReport("n2", "10.0.0.2", "", 0, "Ready")],
        node_cliques={"n1": C1, "n2": ""},
        now=NOW,
        span_cliques=True,
    )
    assert (result.status.status, result.condition("Ready").reason) == ("NotReady", "CliqueMismatch")
    assert "(no clique): n2" in result.condition("CliqueConsistent").message


def test_a_daemon_says_why_it_is_not_ready() -> None:
    failing = ComputeDomainDaemonInfo.from_wire(
        {"nodeName": "n1", "ipAddress": "10.0.0.1", "cliqueID": C1, "index": 0, "status": "NotReady",
         "message": "nvidia-imex exited: fabric-imex-mgmt capability not available"}
    )  # fmt: skip
    result = aggregate_status(
        domain(), workload_nodes=["n1"], daemons=[failing], node_cliques={"n1": C1}, now=NOW
    )
    assert (
        "nvidia-imex exited: fabric-imex-mgmt capability not available" in result.condition("Ready").message
    )
    assert result.problems[0].reason == "DaemonNotReady"
