"""A claim removed from the API while it is still prepared on its node (the kubelet could not unprepare it: the agent
was down, or the claim was forced out): the agent unprepares it after its grace period (tests/orphankit.py)."""

from __future__ import annotations

from clusterkit import StartCluster
from orphankit import FAST_SWEEP, a_claim_gone_while_prepared_is_unprepared


async def test_a_claim_gone_while_prepared_is_unprepared_and_the_others_stay(
    start_cluster: StartCluster,
) -> None:
    cluster = await start_cluster("l4x4:1", agent_settings=FAST_SWEEP, hardware_poll_seconds=0.1)
    await a_claim_gone_while_prepared_is_unprepared(cluster, "l4x4-0")
