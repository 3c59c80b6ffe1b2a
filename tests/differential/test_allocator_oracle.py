"""gpudra's allocator against Kubernetes' own (k8s.io/dynamic-resource-allocation/structured, the code
kube-scheduler runs): the same random scenarios must give the same answer, allocated or not, the same devices
for every request of every claim, and, when not allocated, agree on whether a selector failed at runtime.

Each run checks ``GPUDRA_ORACLE_EXAMPLES`` scenarios (2000 by default) from a random seed printed in the summary;
``GPUDRA_ORACLE_SEED=<seed>`` replays a run. A failure names the scenario's number (``scenario(Random(n))``
rebuilds it) and prints it as one JSON line, which ``hack/oracle``'s binary answers when fed on stdin.
"""

from __future__ import annotations

from typing import Any

from _oracle_run import EXAMPLES, SEED, Oracle, gpudra, kubernetes, one_line, tally
from _oracle_scenarios import scenarios
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
    ours = gpudra(scenario)
    tally(kube)
    assert (ours.allocated, ours.claims, ours.selector_error) == (
        kube.allocated,
        kube.claims,
        kube.selector_error,
    ), (
        f"scenario {number} (_oracle_scenarios.scenario(Random({number}))):\nKubernetes: {kube}\n"
        f"gpudra: {ours}\nscenario: {one_line(scenario)}"
    )
