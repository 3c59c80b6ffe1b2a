"""On the embedded cluster, `kubectl describe pod` says why a pod waits, in gpudra's words: the controller posts
its claims' explanations on the pod (tests/kubernetes/test_real_pod_explanations.py checks the same on the real
control plane)."""

from __future__ import annotations

import shutil

import pytest

from clusterkit import StartCluster
from gpudra.config import ControllerSettings
from podexplainkit import (
    check_claim_made_twice_names_the_first,
    check_mig_1g_12gb_pod_is_explained,
    check_missing_claim_is_said_as_a_kubelet_says,
    check_prebound_pod_is_explained,
    check_waiting_pod_is_explained,
    check_web_view_shows_the_mig_1g_12gb_claim,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH"),
]
FAST = ControllerSettings(pending_grace_seconds=0.2, pending_interval_seconds=0.5)


async def test_a_waiting_pod_carries_its_claims_explanation(start_cluster: StartCluster) -> None:
    await check_waiting_pod_is_explained(await start_cluster("dgx-h100:1", controller=FAST))


async def test_a_pod_created_on_a_node_says_its_claim_will_not_be_allocated(
    start_cluster: StartCluster,
) -> None:
    """And the stand-in kubelet's Warnings on pods created on the node say what a 1.37 kubelet says (the same
    check runs with a real kubelet in tests/kubernetes/test_real_pod_explanations.py)."""
    cluster = await start_cluster("dgx-h100:1", controller=FAST, web_port=0)
    await check_prebound_pod_is_explained(cluster)
    await check_missing_claim_is_said_as_a_kubelet_says(cluster)


async def test_nvidias_mig_1g_12gb_spec_is_explained_on_the_pod(start_cluster: StartCluster) -> None:
    cluster = await start_cluster("dgx-h100:1", controller=FAST, web_port=0)
    await check_mig_1g_12gb_pod_is_explained(cluster)
    await check_web_view_shows_the_mig_1g_12gb_claim(cluster)


async def test_a_claim_made_twice_for_a_running_pod_names_the_first(start_cluster: StartCluster) -> None:
    await check_claim_made_twice_names_the_first(await start_cluster("dgx-h100:1", controller=FAST))
