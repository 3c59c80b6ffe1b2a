"""GPU health in the agent: an injected XID taints the device on its ResourceSlice and the scheduler stops picking
it; ignored XIDs are tainted with effect None; taints go away when the device is quiet again; a lost GPU leaves the
slice; the Node gets an Event."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from clusterkit import StartCluster, eventually
from gpudra.cluster.up import EmbeddedCluster
from gpudra.hardware.simulated import FakeNvml
from gpudra.kube.resources import EVENTS, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES


async def devices(cluster: EmbeddedCluster, node: str) -> dict[str, dict[str, Any]]:
    assert cluster.client is not None
    slices, _ = await cluster.client.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={node}")
    return {d["name"]: d for s in slices for d in s["spec"].get("devices") or []}


async def inject(fake: FakeNvml, gpu: int, xid: int) -> None:
    """Inject once the agent's health thread listens (an event nobody waits for is lost, as in NVML)."""
    await eventually(lambda: asyncio.sleep(0, result=fake.inject_xid(gpu, xid) > 0))


@pytest.fixture
async def cluster(start_cluster: StartCluster) -> EmbeddedCluster:
    return await start_cluster("dgx-h100:1,dgx-a100:1", hardware_poll_seconds=0.1)


async def test_xid_taints_the_gpu_and_recovers(cluster: EmbeddedCluster) -> None:
    agent = cluster.agents["dgx-h100-0"]
    agent.health.recovery_seconds = 1.0
    await inject(cluster.simulated["dgx-h100-0"], 3, 79)

    async def tainted() -> list[dict[str, Any]]:
        return list((await devices(cluster, "dgx-h100-0"))["gpu-3"].get("taints") or [])

    (taint,) = await eventually(tainted)
    assert (taint["key"], taint["value"], taint["effect"]) == ("gpu.nvidia.com/xid", "79", "NoSchedule")
    assert cluster.client is not None
    events, _ = await cluster.client.list(EVENTS, "default", field_selector="involvedObject.name=dgx-h100-0")
    assert any(e["reason"] == "GpuHealth" and "XID 79" in e["message"] for e in events)

    async def recovered() -> bool:
        return not (await devices(cluster, "dgx-h100-0"))["gpu-3"].get("taints")

    await eventually(recovered)


async def test_ignored_xid_is_visible_but_does_not_repel(cluster: EmbeddedCluster) -> None:
    await inject(cluster.simulated["dgx-h100-0"], 0, 13)

    async def tainted() -> list[dict[str, Any]]:
        return list((await devices(cluster, "dgx-h100-0"))["gpu-0"].get("taints") or [])

    (taint,) = await eventually(tainted)
    assert (taint["value"], taint["effect"]) == ("13", "None")


async def test_whole_gpu_xid_taints_every_mig_device_of_that_gpu(cluster: EmbeddedCluster) -> None:
    await inject(cluster.simulated["dgx-a100-0"], 1, 48)

    async def tainted_names() -> set[str]:
        return {n for n, d in (await devices(cluster, "dgx-a100-0")).items() if d.get("taints")}

    names = await eventually(tainted_names)
    assert names == {n for n in await devices(cluster, "dgx-a100-0") if n.startswith("gpu-1-mig-")}
    assert len(names) == 4


async def test_lost_gpu_leaves_the_slice(cluster: EmbeddedCluster) -> None:
    cluster.simulated["dgx-h100-0"].lose_gpu(5)

    async def gone() -> bool:
        return "gpu-5" not in await devices(cluster, "dgx-h100-0")

    await eventually(gone)
    assert len(await devices(cluster, "dgx-h100-0")) == 7


async def test_scheduler_no_longer_picks_a_tainted_gpu(cluster: EmbeddedCluster) -> None:
    await inject(cluster.simulated["dgx-h100-0"], 0, 79)

    async def tainted() -> bool:
        return bool((await devices(cluster, "dgx-h100-0"))["gpu-0"].get("taints"))

    await eventually(tainted)
    await asyncio.sleep(0.3)  # the scheduler's slice cache follows the watch
    assert cluster.client is not None
    claim = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "one-gpu", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
    }  # fmt: skip
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
        "spec": {"resourceClaims": [{"name": "g", "resourceClaimName": "one-gpu"}],
                 "containers": [{"name": "c", "image": "busybox"}]},
    }  # fmt: skip
    await cluster.client.create(RESOURCE_CLAIMS, claim, "default")
    await cluster.client.create(PODS, pod, "default")

    async def allocated() -> list[dict[str, Any]]:
        body = await cluster.client.get(RESOURCE_CLAIMS, "one-gpu", "default")  # type: ignore[union-attr]
        return list(
            ((body.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
        )

    (result,) = await eventually(allocated)
    assert (result["pool"], result["device"]) == ("dgx-h100-0", "gpu-1")
