"""On the embedded cluster, every scenario of the golden corpus (tests/golden/pending_claims.yaml) reaches the pod:
`kubectl describe pod` shows gpudra's sentence for it, the same text as on the real control plane
(tests/kubernetes/test_real_golden_pods.py; the kit: tests/goldenkit.py)."""

from __future__ import annotations

import shutil

import pytest

from clusterkit import StartCluster
from goldenfleet import scenarios
from goldenkit import check_corpus
from gpudra.config import ControllerSettings

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH"),
    pytest.mark.timeout(600),
]
FAST = ControllerSettings(pending_grace_seconds=0.2, pending_interval_seconds=0.5)


async def test_every_golden_scenario_is_explained_on_its_pod(start_cluster: StartCluster) -> None:
    corpus = [s for s in scenarios() if s.get("planner") != "off"]
    await check_corpus(await start_cluster([], controller=FAST), corpus)


async def test_golden_scenarios_with_the_mig_planner_off(start_cluster: StartCluster) -> None:
    corpus = [s for s in scenarios() if s.get("planner") == "off"]
    off = FAST.model_copy(update={"mig_planner": "off"})
    await check_corpus(await start_cluster([], controller=off), corpus)
