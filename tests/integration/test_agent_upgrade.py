"""Upgrading the node agent without draining, on the embedded cluster (the same on the real control plane:
tests/kubernetes/test_real_agent_upgrade.py)."""

from __future__ import annotations

from clusterkit import StartCluster
from upgradekit import (
    a_prepare_in_flight_at_the_handover_happens_once,
    a_rolling_update_hands_over_without_draining,
)


async def test_a_rolling_update_of_the_agent_process_keeps_pods_running(start_cluster: StartCluster) -> None:
    cluster = await start_cluster("dgx-h100:1", agent_processes=True, hardware_poll_seconds=0.1)
    await a_rolling_update_hands_over_without_draining(cluster, "dgx-h100-0")


async def test_a_prepare_in_flight_at_the_handover_happens_exactly_once(start_cluster: StartCluster) -> None:
    cluster = await start_cluster("dgx-h100:1", dynamic_mig=True, hardware_poll_seconds=0.1)
    await a_prepare_in_flight_at_the_handover_happens_once(cluster, "dgx-h100-0")
