"""Upgrading the node agent without draining, on the real control plane: the same scenarios as the embedded
cluster's tests/integration/test_agent_upgrade.py, with kube-scheduler allocating and the agents' node-bound
ServiceAccount identities."""

from __future__ import annotations

from _realkit import StartKubernetes

from upgradekit import (
    a_prepare_in_flight_at_the_handover_happens_once,
    a_rolling_update_hands_over_without_draining,
)


async def test_a_rolling_update_of_the_agent_process_keeps_pods_running(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("dgx-h100:1", agent_processes=True)
    await a_rolling_update_hands_over_without_draining(cluster, "dgx-h100-0")


async def test_a_prepare_in_flight_at_the_handover_happens_exactly_once(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("dgx-h100:1", dynamic_mig=True)
    await a_prepare_in_flight_at_the_handover_happens_once(cluster, "dgx-h100-0")
