"""On kube-apiserver: a claim force-deleted while its node's agent process was down, still prepared there, is
unprepared by the agent after its grace period (tests/orphankit.py)."""

from __future__ import annotations

from _realkit import StartKubernetes

from orphankit import FAST_SWEEP, a_claim_gone_while_prepared_is_unprepared


async def test_a_claim_gone_while_its_agent_was_down_is_unprepared_and_the_others_stay(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("l4x4:1", agent_settings=FAST_SWEEP, agent_processes=True)
    await a_claim_gone_while_prepared_is_unprepared(cluster, "l4x4-0", agent_down=True)
