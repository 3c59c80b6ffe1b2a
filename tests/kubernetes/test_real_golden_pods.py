"""On kube-apiserver, kube-scheduler and kube-controller-manager 1.37.2, every scenario of the golden corpus
(tests/golden/pending_claims.yaml) reaches the pod: `kubectl describe pod` shows gpudra's sentence for it, the same
text as on the embedded cluster (tests/e2e/test_golden_pods.py; the kit: tests/goldenkit.py). One control plane
serves all the scenarios that share the controller's settings."""

from __future__ import annotations

import pytest
from _realkit import FAST_CONTROLLER, StartKubernetes

from goldenfleet import scenarios
from goldenkit import check_corpus

pytestmark = pytest.mark.timeout(600)


async def test_every_golden_scenario_is_explained_on_its_pod(start_kubernetes: StartKubernetes) -> None:
    corpus = [s for s in scenarios() if s.get("planner") != "off"]
    await check_corpus(await start_kubernetes([]), corpus)


async def test_golden_scenarios_with_the_mig_planner_off(start_kubernetes: StartKubernetes) -> None:
    corpus = [s for s in scenarios() if s.get("planner") == "off"]
    off = FAST_CONTROLLER.model_copy(update={"mig_planner": "off"})
    await check_corpus(await start_kubernetes([], controller=off), corpus)
