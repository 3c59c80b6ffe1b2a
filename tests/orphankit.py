"""A claim removed from the API while still prepared on its node, run the same on the embedded cluster
(tests/integration/test_orphaned_claims.py) and on the real control plane (tests/kubernetes/test_real_orphans.py):
the agent unprepares it after its grace period, with a Warning on the Node, and claims that still exist stay."""

from __future__ import annotations

from typing import Any

from clusterkit import eventually, kubectl
from gpudra.cluster.up import EmbeddedCluster
from gpudra.kube.resources import EVENTS, RESOURCE_CLAIMS
from upgradekit import all_running, cdi_claims, checkpoint, claim_uids, gpu_pod

FAST_SWEEP = {"orphan_sweep_seconds": 0.2, "orphan_grace_seconds": 1.0}


async def node_warnings(client: Any, reason: str) -> list[str]:
    events, _ = await client.list_raw(EVENTS, "default")
    return [
        e.get("message", "")
        for e in events
        if e.get("reason") == reason and (e.get("involvedObject") or {}).get("kind") == "Node"
    ]


async def a_claim_gone_while_prepared_is_unprepared(
    cluster: EmbeddedCluster, node: str, *, agent_down: bool = False
) -> None:
    """``agent_down``: the claim goes while the node's agent process is down, and the agent starts afterwards."""
    client = cluster.client
    assert client is not None
    await kubectl(cluster, "apply", "-f", "-", stdin=gpu_pod("keep") + "---" + gpu_pod("gone"))
    await all_running(cluster, ["keep", "gone"])
    uids = await claim_uids(cluster, ["keep", "gone"])
    assert set(checkpoint(cluster, node)) == set(uids.values())
    gone_device = checkpoint(cluster, node)[uids["gone"]].devices[0].device_name

    agent = cluster.agent_processes[node] if agent_down else None
    if agent is not None:
        await agent.kill()
    # forced out while prepared: its delete protection lifted by hand, as a force-delete does
    await client.patch(RESOURCE_CLAIMS, "gone", {"metadata": {"finalizers": None}}, "default")
    await client.delete(RESOURCE_CLAIMS, "gone", "default")
    if agent is not None:
        await agent.start()

    await eventually(
        lambda: uids["gone"] not in checkpoint(cluster, node), timeout=30, what="the orphan unprepared"
    )
    assert set(checkpoint(cluster, node)) == {uids["keep"]}
    assert cdi_claims(cluster, node) == {uids["keep"]}
    warnings = await eventually(lambda: node_warnings(client, "OrphanedClaimUnprepared"))
    assert any(f"default/gone (uid {uids['gone']})" in w and gone_device in w for w in warnings), warnings
