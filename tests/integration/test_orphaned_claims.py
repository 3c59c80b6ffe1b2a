"""A claim removed from the API while it is still prepared on its node (the kubelet could not unprepare it: the agent
was down, or the claim was forced out): the agent unprepares it after its grace period, with a Warning on the Node,
and claims that still exist stay prepared."""

from __future__ import annotations

from typing import Any

from clusterkit import StartCluster, eventually, kubectl
from gpudra.kube.resources import EVENTS, RESOURCE_CLAIMS
from upgradekit import all_running, cdi_claims, checkpoint, claim_uids, gpu_pod

NODE = "l4x4-0"
FAST_SWEEP = {"orphan_sweep_seconds": 0.2, "orphan_grace_seconds": 1.0}


async def node_warnings(client: Any, reason: str) -> list[str]:
    events, _ = await client.list(EVENTS, "default")
    return [
        e.get("message", "")
        for e in events
        if e.get("reason") == reason and (e.get("involvedObject") or {}).get("kind") == "Node"
    ]


async def test_a_claim_gone_while_prepared_is_unprepared_and_the_others_stay(
    start_cluster: StartCluster,
) -> None:
    cluster = await start_cluster("l4x4:1", agent_settings=FAST_SWEEP, hardware_poll_seconds=0.1)
    client = cluster.client
    assert client is not None
    await kubectl(cluster, "apply", "-f", "-", stdin=gpu_pod("keep") + "---" + gpu_pod("gone"))
    await all_running(cluster, ["keep", "gone"])
    uids = await claim_uids(cluster, ["keep", "gone"])
    assert set(checkpoint(cluster, NODE)) == set(uids.values())
    gone_device = checkpoint(cluster, NODE)[uids["gone"]].devices[0].device_name

    # forced out while prepared: its delete protection lifted by hand, as after a force-delete
    await client.patch(RESOURCE_CLAIMS, "gone", {"metadata": {"finalizers": None}}, "default")
    await client.delete(RESOURCE_CLAIMS, "gone", "default")

    await eventually(
        lambda: uids["gone"] not in checkpoint(cluster, NODE), timeout=30, what="the orphan unprepared"
    )
    assert set(checkpoint(cluster, NODE)) == {uids["keep"]}
    assert cdi_claims(cluster, NODE) == {uids["keep"]}
    warnings = await eventually(lambda: node_warnings(client, "OrphanedClaimUnprepared"))
    assert any(f"default/gone (uid {uids['gone']})" in w and gone_device in w for w in warnings), warnings
