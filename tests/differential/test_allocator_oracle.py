"""gpudra's allocator against Kubernetes' own (k8s.io/dynamic-resource-allocation/structured, the code
kube-scheduler runs): the same random scenarios must give the same answer: the same outcome class (allocated,
unschedulable on the node, or an error that aborts the pod's scheduling attempt), the same devices for every
request of every claim, and for an error the same message (up to a CEL runtime error's own text). A scenario whose
search in Kubernetes ran past kube-scheduler's filter timeout is counted as "timed out" and not compared: the same
scenario finishes in time on a quieter machine.

Each run checks ``GPUDRA_ORACLE_EXAMPLES`` scenarios (2000 by default) from a random seed printed in the summary;
``GPUDRA_ORACLE_SEED=<seed>`` replays a run. A failure names the scenario's number (``scenario(Random(n))``
rebuilds it) and prints it as one JSON line, which ``hack/oracle``'s binary answers when fed on stdin.
"""

from __future__ import annotations

from random import Random
from typing import Any

from _oracle_run import EXAMPLES, SEED, TIMED_OUT, Oracle, gpudra, kubernetes, one_line, tally
from _oracle_scenarios import CLASSES, DRIVER, scenario, scenarios
from hypothesis import HealthCheck, given, seed, settings


@seed(SEED)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(case=scenarios())
def test_same_answer_as_kubernetes(oracle: Oracle, case: tuple[int, dict[str, Any]]) -> None:
    number, scenario = case
    kube = kubernetes(oracle, scenario)
    tally(kube, scenario)
    if kube.outcome == TIMED_OUT:  # counted in the summary; gpudra's allocator has no such timeout
        return
    ours = gpudra(scenario)
    assert (ours.outcome, ours.claims, ours.error) == (kube.outcome, kube.claims, kube.error), (
        f"scenario {number} (_oracle_scenarios.scenario(Random({number}))):\nKubernetes: {kube}\n"
        f"gpudra: {ours}\nscenario: {one_line(scenario)}"
    )


def test_list_match_backtracking_restores_the_common_values_as_kubernetes_does(oracle: Oracle) -> None:
    """matchAttribute on a list: b's first pick (gpu-1, common value y) leaves no second device, so the search
    drops it and must widen the common values back to a's {x, y} to find gpu-2 and gpu-3. Kubernetes' allocator
    (v0.37.2, its experimental implementation, the only one with list-typed attributes) does, as gpudra does."""
    peers = {"gpu-0": ["x", "y"], "gpu-1": ["y"], "gpu-2": ["x"], "gpu-3": ["x"]}
    devices = [
        {"name": n, "attributes": {"type": {"string": "gpu"}, "peers": {"strings": p}}}
        for n, p in peers.items()
    ]
    pool = {"name": "n1", "generation": 1, "resourceSliceCount": 1}
    requests = [
        {"name": "a", "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}},
        {"name": "b", "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 2}},
    ]
    constraints = [{"matchAttribute": "gpu.nvidia.com/peers"}]
    scenario = {
        "listTypeAttributes": True,
        "node": {"name": "n1"},
        "slices": [
            {
                "metadata": {"name": "s"},
                "spec": {"driver": DRIVER, "nodeName": "n1", "pool": pool, "devices": devices},
            }
        ],
        "classes": CLASSES,
        "claims": [
            {
                "metadata": {"name": "c0", "namespace": "default"},
                "spec": {"devices": {"requests": requests, "constraints": constraints}},
            }
        ],
        "allocated": [],
    }
    kube, ours = kubernetes(oracle, scenario), gpudra(scenario)
    assert kube.allocated and [(d[0], d[3]) for d in kube.claims[0][0]] == [
        ("a", "gpu-0"),
        ("b", "gpu-2"),
        ("b", "gpu-3"),
    ]
    assert ours == kube


def test_allocations_on_other_nodes_use_up_the_pools_counters_as_kubernetes_counts_them(
    oracle: Oracle,
) -> None:
    """Found by a random run: a device allocated on node n2 (a slice whose devices each name their node) consumes
    the pool's whole counter, so on n1 Kubernetes gives the claim another device; gpudra counted only the devices
    of the slices that reach n1 and gave the one whose counter was used up."""
    number = 2_351_001_186
    case = scenario(Random(number))
    kube, ours = kubernetes(oracle, case), gpudra(case)
    assert kube.outcome == "allocated"
    assert (ours.outcome, ours.claims, ours.error) == (kube.outcome, kube.claims, kube.error)
