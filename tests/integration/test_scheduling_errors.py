"""The stand-in scheduler aborts a pod's scheduling attempt on an allocator error as kube-scheduler does
(allocerrorkit's repro; the real control plane's run is tests/kubernetes/test_real_scheduling_errors.py)."""

from __future__ import annotations

import pytest

from allocerrorkit import FLEET, stays_pending_with_the_error
from clusterkit import StartCluster


@pytest.mark.parametrize("bad", ["fx-1", "fx-2"], ids=["error-first", "fit-first"])
async def test_a_cel_runtime_error_on_one_node_keeps_the_pod_pending_with_the_error(
    start_cluster: StartCluster, bad: str
) -> None:
    await stays_pending_with_the_error(await start_cluster(FLEET), bad)
