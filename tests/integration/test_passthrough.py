"""Passthrough in the embedded cluster (``passthrough_support``): a claim of class vfio.gpu.nvidia.com gets a
GPU bound to vfio-pci with /dev/vfio/<group> in its CDI spec, the same GPU's container use cannot be allocated
meanwhile, and deleting the claim's pod gives the GPU back so it is offered again. The simulated node stands in for
vfio-pci; the real sysfs path is not exercised here."""

from __future__ import annotations

from typing import Any

import pytest

from clusterkit import eventually
from gpudra.cluster.up import EmbeddedCluster
from gpudra.kube.resources import EVENTS, PODS, RESOURCE_CLAIMS
from passthroughkit import NODE, NS, bus_of, claim_and_pod, published, published_when, running


@pytest.fixture
def cluster(passthrough_cluster: EmbeddedCluster) -> EmbeddedCluster:
    return passthrough_cluster


async def test_a_vm_claim_gets_a_gpu_on_vfio_and_gives_it_back(cluster: EmbeddedCluster) -> None:
    client = cluster.client
    assert client is not None
    devices = await eventually(
        lambda: published_when(client, lambda d: "gpu-vfio-3" in d), what="passthrough devices published"
    )
    assert devices["gpu-vfio-0"]["attributes"]["type"] == {"string": "vfio"}

    uid = await claim_and_pod(client, "vm", "vfio.gpu.nvidia.com")
    await eventually(lambda: running(client, "vm"), 30.0, what="the VM pod running")
    claim = await client.get_raw(RESOURCE_CLAIMS, "vm", NS)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result["device"].startswith("gpu-vfio-")
    bus = bus_of(devices[result["device"]])

    runtime = cluster.runtimes[NODE]
    assert runtime.preparer is not None
    pci = {g.pci_bus_id: g for g in cluster.simulated_gpus(NODE).pci_bus.gpus()}
    assert pci[bus].driver == "vfio-pci"
    spec = runtime.preparer.effects.specs.read(uid)
    assert spec is not None
    nodes = [n["path"] for d in spec["devices"] for n in d["containerEdits"].get("deviceNodes", [])]
    assert nodes == [f"/dev/vfio/{pci[bus].iommu_group}"]
    assert "NVIDIA_VISIBLE_DEVICES=void" in spec["containerEdits"]["env"]
    assert not any(n["path"].startswith("/dev/nvidia") for n in spec["containerEdits"].get("deviceNodes", []))

    # the GPU is gone from NVML: its container device leaves the slices, its passthrough device stays
    def container_device_gone(d: dict[str, dict[str, Any]]) -> bool:
        return not any("vfio" not in name and bus_of(device) == bus for name, device in d.items())

    after = await eventually(
        lambda: published_when(client, container_device_gone),
        what="the bound GPU's container device unpublished",
    )
    assert result["device"] in after

    await claim_and_pod(client, "container", "gpu.nvidia.com", bus)

    async def refused() -> bool:
        events, _ = await client.list_raw(EVENTS, NS, field_selector="involvedObject.name=container")
        return any(e["reason"] == "FailedScheduling" for e in events)

    await eventually(refused, 30.0, what="the container pod refused while the GPU is passed through")
    assert not (await client.get_raw(PODS, "container", NS))["spec"].get("nodeName")

    await client.delete(PODS, "vm", NS)
    preparer = runtime.preparer

    async def unprepared() -> bool:
        return preparer.effects.specs.read(uid) is None and preparer.store.get(uid) is None

    await eventually(unprepared, 30.0, what="the VM claim unprepared")
    assert {g.pci_bus_id: g for g in cluster.simulated_gpus(NODE).pci_bus.gpus()}[bus].driver == "nvidia"
    await eventually(
        lambda: running(client, "container"), 60.0, what="the GPU offered again, to the container"
    )
    claim = await client.get_raw(RESOURCE_CLAIMS, "container", NS)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert bus_of((await published(client))[result["device"]]) == bus
