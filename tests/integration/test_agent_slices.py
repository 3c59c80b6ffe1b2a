"""Node agents against the embedded API server over simulated NVML: slices appear for every node, follow hardware
changes without a restart, never touch another node's slices, and survive an agent restart without churn."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from clusterkit import StartCluster, client_of, eventually
from gpudra.agent.node_agent import NodeAgent
from gpudra.cluster.up import EmbeddedCluster
from gpudra.config import AgentSettings
from gpudra.hardware.gpus.inventory import NodeInventory
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.kube.resources import NODES, RESOURCE_SLICES
from gpudra.mig.desired import STATE_ANNOTATION

FLEET = "dgx-a100:1,dgx-h100:1,l4x4:1"


@pytest.fixture
async def cluster(start_cluster: StartCluster) -> EmbeddedCluster:
    return await start_cluster(FLEET, hardware_poll_seconds=0.1)


async def node_slices(cluster: EmbeddedCluster, node: str) -> list[dict[str, Any]]:
    assert cluster.client is not None
    items, _ = await cluster.client.list_raw(RESOURCE_SLICES, field_selector=f"spec.nodeName={node}")
    return sorted(items, key=lambda s: s["metadata"]["name"])


def device_names(slices: list[dict[str, Any]]) -> set[str]:
    return {d["name"] for s in slices for d in s["spec"].get("devices") or []}


async def test_every_simulated_node_publishes_its_devices(cluster: EmbeddedCluster) -> None:
    a100 = device_names(await node_slices(cluster, "dgx-a100-0"))
    h100 = device_names(await node_slices(cluster, "dgx-h100-0"))
    l4 = device_names(await node_slices(cluster, "l4x4-0"))
    assert h100 == {f"gpu-{i}" for i in range(8)}
    assert l4 == {f"gpu-{i}" for i in range(4)}
    assert len(a100) == 32  # all-balanced: 1g.5gb x2 + 2g.10gb + 3g.20gb on each of 8 GPUs
    assert all("-mig-" in name for name in a100)
    for node in ("dgx-a100-0", "dgx-h100-0", "l4x4-0"):
        (slice_,) = await node_slices(cluster, node)
        assert slice_["spec"]["pool"]["name"] == node
        assert slice_["spec"]["driver"] == "gpu.nvidia.com"
        assert slice_["metadata"]["ownerReferences"][0]["kind"] == "Node"


async def test_mig_change_is_published_without_restart(cluster: EmbeddedCluster) -> None:
    agent = cluster.agents["dgx-a100-0"]
    backend = agent._backend
    before = await node_slices(cluster, "dgx-a100-0")
    generation = before[0]["spec"]["pool"]["generation"]
    inventory = backend.read_inventory()
    victim = inventory.gpus[0].mig_devices[0]
    gone = f"gpu-0-mig-{victim.profile.replace('.', '')}-{victim.gi_profile_id}-{victim.placement_start}"
    assert gone in device_names(before)

    backend.destroy_mig_device(0, victim.gi_id)

    async def removed() -> bool:
        return gone not in device_names(await node_slices(cluster, "dgx-a100-0"))

    await eventually(removed, 5.0, interval=0.02)
    after = await node_slices(cluster, "dgx-a100-0")
    assert [s["metadata"]["name"] for s in after] == [s["metadata"]["name"] for s in before]
    assert after[0]["spec"]["pool"]["generation"] == generation + 1
    assert len(device_names(after)) == 31

    backend.create_mig_device(0, victim.profile, victim.placement_start)

    async def restored() -> bool:
        return gone in device_names(await node_slices(cluster, "dgx-a100-0"))

    await eventually(restored)


async def test_an_agent_reads_its_gpus_once_to_publish_report_mig_and_recover(
    start_cluster: StartCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start's recovery (bare GPU instances), the node's MIG report and the first publish share one reading of
    the GPUs (an 8-GPU node asks NVML hundreds of times for one); each read the node on its own before."""
    readings: dict[str, int] = {}
    read = NvmlBackend.read_inventory

    def counted(self: NvmlBackend, *, nvlink_peers: bool = True) -> NodeInventory:
        readings[self.node_name] = readings.get(self.node_name, 0) + 1
        return read(self, nvlink_peers=nvlink_peers)

    monkeypatch.setattr(NvmlBackend, "read_inventory", counted)
    cluster = await start_cluster("dgx-a100:1", hardware_poll_seconds=30)
    node = "dgx-a100-0"
    assert cluster.client is not None
    client = cluster.client

    async def reported() -> bool:
        annotations = (await client.get_raw(NODES, node))["metadata"].get("annotations") or {}
        return STATE_ANNOTATION in annotations and bool(await node_slices(cluster, node))

    await eventually(reported, timeout=30, what="the node's slices and its MIG report")
    assert len(device_names(await node_slices(cluster, node))) == 32
    assert '"1g.5gb"' in (await client.get_raw(NODES, node))["metadata"]["annotations"][STATE_ANNOTATION]
    assert readings == {node: 1}


async def test_agents_never_touch_other_nodes_slices(cluster: EmbeddedCluster) -> None:
    others = {n: await node_slices(cluster, n) for n in ("dgx-h100-0", "l4x4-0")}
    backend = cluster.agents["dgx-a100-0"]._backend
    victim = backend.read_inventory().gpus[1].mig_devices[0]
    backend.destroy_mig_device(1, victim.gi_id)

    async def republished() -> bool:
        return len(device_names(await node_slices(cluster, "dgx-a100-0"))) == 31

    await eventually(republished)
    for node, slices in others.items():
        now = await node_slices(cluster, node)
        assert [s["metadata"]["resourceVersion"] for s in now] == [
            s["metadata"]["resourceVersion"] for s in slices
        ]


async def test_agent_restart_keeps_the_same_slices_without_writes(cluster: EmbeddedCluster) -> None:
    node = "dgx-h100-0"
    before = await node_slices(cluster, node)
    task = next(t for t in cluster._tasks if t.get_name() == f"agent {node}")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    old = cluster.agents[node]
    settings = AgentSettings(node_name=node, backend="simulated", hardware_poll_seconds=0.1)
    assert cluster.client is not None
    restarted = NodeAgent(
        settings, NvmlBackend(node, nvml=cluster.simulated[node]), cluster.client, cluster.metrics
    )
    new_task = asyncio.create_task(restarted.run())
    try:
        await asyncio.wait_for(restarted.published.wait(), timeout=10)
        after = await node_slices(cluster, node)
        assert [(s["metadata"]["name"], s["metadata"]["resourceVersion"]) for s in after] == [
            (s["metadata"]["name"], s["metadata"]["resourceVersion"]) for s in before
        ]
        assert restarted.publisher is not None and old.publisher is not None
        assert restarted.publisher.slice_names == old.publisher.slice_names
    finally:
        new_task.cancel()
        await asyncio.gather(new_task, return_exceptions=True)


async def test_deleted_slice_is_recreated_at_the_next_full_resync(cluster: EmbeddedCluster) -> None:
    node = "l4x4-0"
    (slice_,) = await node_slices(cluster, node)
    assert cluster.client is not None
    cluster.agents[node].settings = cluster.agents[node].settings.model_copy(
        update={"full_resync_seconds": 0.2}
    )
    await cluster.client.delete(RESOURCE_SLICES, slice_["metadata"]["name"])

    async def back() -> bool:
        return device_names(await node_slices(cluster, node)) == {f"gpu-{i}" for i in range(4)}

    await eventually(back)


async def test_slices_deleted_as_a_starting_kubelet_deletes_them_come_back_at_once(
    cluster: EmbeddedCluster,
) -> None:
    """A kubelet deletes every ResourceSlice of its node when it starts (DeleteCollection by spec.nodeName): the
    agent watches its slices and publishes again without waiting for the full resync (an hour here)."""
    node = "dgx-h100-0"
    before = device_names(await node_slices(cluster, node))
    assert cluster.client is not None
    cluster.agents[node].settings = cluster.agents[node].settings.model_copy(
        update={"full_resync_seconds": 3600}
    )
    for slice_ in await node_slices(cluster, node):
        await cluster.client.delete(RESOURCE_SLICES, slice_["metadata"]["name"])

    async def back() -> bool:
        return device_names(await node_slices(cluster, node)) == before

    await eventually(back)


async def test_node_says_its_slices_are_published(cluster: EmbeddedCluster) -> None:
    assert cluster.client is not None
    node = await cluster.client.get_raw(NODES, "dgx-h100-0")
    assert (node["metadata"].get("labels") or {}).get("gpudra.dev/resourceslices-published") == "true"
    (slice_,) = await node_slices(cluster, "dgx-h100-0")
    generation = str(slice_["spec"]["pool"]["generation"])
    assert node["metadata"]["annotations"]["gpudra.dev/resourceslices-generation"] == generation

    backend = cluster.agents["dgx-a100-0"]._backend
    backend.destroy_mig_device(2, backend.read_inventory().gpus[2].mig_devices[0].gi_id)

    async def annotated() -> bool:
        body = await client_of(cluster).get_raw(NODES, "dgx-a100-0")
        (current,) = await node_slices(cluster, "dgx-a100-0")
        want = str(current["spec"]["pool"]["generation"])
        return str(body["metadata"]["annotations"]["gpudra.dev/resourceslices-generation"]) == want != "1"

    await eventually(annotated)
