"""While one GPU is bound to vfio-pci, NVML no longer lists it and the GPUs after it move down an NVML index.
The other GPUs must keep their identity: an XID on one of them taints its own device and marks its own claim,
and a claim prepared on it before the bind keeps a CDI spec that names it. With device metadata on, a VM
claim's metadata file names the PCI function bound."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from clusterkit import StartCluster, eventually
from gpudra.cluster.up import EmbeddedCluster
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import NAMESPACES, RESOURCE_CLAIMS
from passthroughkit import NODE, NS, bus_of, claim_and_pod, published, running


@pytest.fixture
def cluster(passthrough_cluster: EmbeddedCluster) -> EmbeddedCluster:
    return passthrough_cluster


async def claim_status(client: KubeClient, name: str) -> dict[str, dict[str, Any]]:
    body = await client.get_raw(RESOURCE_CLAIMS, name, NS)
    return {e["device"]: e for e in (body.get("status") or {}).get("devices") or []}


async def test_an_xid_on_another_gpu_taints_that_gpu_while_one_is_on_vfio(cluster: EmbeddedCluster) -> None:
    client, fake = cluster.client, cluster.simulated[NODE]
    assert client is not None
    buses = [g.pci_bus_id for g in fake.pci_bus.gpus()]
    await eventually(lambda: published_has(client, "gpu-vfio-3"), what="passthrough devices published")

    # a container claim on the last GPU, prepared while every GPU is on nvidia
    uid = await claim_and_pod(client, "train", "gpu.nvidia.com", buses[3])
    await eventually(lambda: running(client, "train"), 30.0, what="the container pod running")
    (device,) = (await claim_status(client, "train")).keys()
    assert device == "gpu-3"
    runtime = cluster.runtimes[NODE]
    assert runtime.preparer is not None
    spec_before = runtime.preparer.effects.specs.read(uid)
    uuid = fake.gpu(3).uuid

    # the first GPU goes to a VM: the container's GPU is NVML index 2 from now on
    await claim_and_pod(client, "vm", "vfio.gpu.nvidia.com", buses[0])
    await eventually(lambda: running(client, "vm"), 30.0, what="the VM pod running")
    await eventually(lambda: index_moved(cluster, uuid), what="the agent reading the GPU at NVML index 2")
    assert runtime.preparer.effects.specs.read(uid) == spec_before  # still /dev/nvidia3 and the same UUID
    assert spec_before is not None and uuid in str(spec_before) and "/dev/nvidia3" in str(spec_before)

    await eventually(lambda: _injected(fake.inject_xid(3, 79)), what="the health watch listening")

    async def unhealthy() -> dict[str, Any] | None:
        entry = (await claim_status(client, "train"))["gpu-3"]
        healthy = next(c for c in entry["conditions"] if c["type"] == "Healthy")
        return healthy if healthy["status"] == "False" else None

    condition = await eventually(unhealthy, what="the train claim marked unhealthy")
    assert condition["reason"] == "Xid79"
    devices = await published(client)
    tainted = sorted(name for name, d in devices.items() if d.get("taints"))
    assert tainted == ["gpu-3"], "the XID of GPU 3 taints gpu-3 alone"
    assert bus_of(devices["gpu-3"]) == buses[3]


async def published_has(client: KubeClient, name: str) -> bool:
    return name in await published(client)


def agent_inventory(cluster: EmbeddedCluster) -> Any:
    inventory = cluster.agents[NODE].inventory
    assert inventory is not None
    return inventory


async def index_moved(cluster: EmbeddedCluster, uuid: str) -> bool:
    return [g.uuid for g in agent_inventory(cluster).gpus].index(uuid) == 2


async def _injected(count: int) -> bool:
    return count > 0


async def test_a_vm_claims_metadata_names_the_pci_function_bound(start_cluster: StartCluster) -> None:
    """GPUDRA_DEVICE_METADATA with passthrough: the metadata file of a vfio.gpu.nvidia.com claim names the PCI
    bus id of the GPU that prepare bound to vfio-pci (KubeVirt reads it to find the host device)."""
    cluster = await start_cluster(
        "l4x4:1",
        hardware_poll_seconds=0.1,
        agent_settings={"passthrough_support": True, "device_metadata": True},
    )
    client, fake = cluster.client, cluster.simulated[NODE]
    assert client is not None
    await client.apply_object(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    await eventually(lambda: published_has(client, "gpu-vfio-3"), what="passthrough devices published")
    bus = [g.pci_bus_id for g in fake.pci_bus.gpus()][2]
    uid = await claim_and_pod(client, "vm", "vfio.gpu.nvidia.com", bus)
    await eventually(lambda: running(client, "vm"), 30.0, what="the VM pod running")
    assert {g.pci_bus_id: g.driver for g in fake.pci_bus.gpus()}[bus] == "vfio-pci"
    runtime = cluster.runtimes[NODE]
    assert runtime.preparer is not None
    spec = runtime.preparer.effects.specs.read(uid)
    assert spec is not None
    mounts = [m for d in spec["devices"] for m in (d["containerEdits"].get("mounts") or [])]
    (mount,) = [
        m
        for m in mounts
        if m["containerPath"].endswith("/resourceclaims/vm/gpu/gpu.nvidia.com-metadata.json")
    ]
    document: dict[str, Any] = json.loads(await asyncio.to_thread(Path(mount["hostPath"]).read_text))
    (device,) = document["requests"][0]["devices"]
    assert device["name"] == "gpu-vfio-2"
    assert device["attributes"]["resource.kubernetes.io/pciBusID"] == {"string": bus}
    assert device["attributes"]["type"] == {"string": "vfio"}
