"""Passthrough on the real control plane: kube-apiserver takes the slices (a GPU's device and its passthrough device
consuming one counter, also when the GPU is time-shared with allowMultipleAllocations), and kube-scheduler never
gives the GPU to a VM and to a container at once: the container claim waits while the VM holds the GPU and gets it
after."""

from __future__ import annotations

from typing import Any

from _realkit import StartKubernetes

from clusterkit import eventually
from gpudra.kube.resources import EVENTS, NAMESPACES, PODS, RESOURCE_CLAIMS
from passthroughkit import NS, bus_of, claim_and_pod, published, published_when, running


async def test_kube_apiserver_takes_a_time_shared_gpu_that_consumes_the_passthrough_counter(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes(
        "l4x4:1", agent_settings={"passthrough_support": True, "shared_gpu_replicas": 2}
    )
    client = cluster.client
    assert client is not None

    def offered(devices: dict[str, dict[str, Any]]) -> bool:
        return "gpu-vfio-3" in devices and bool(devices.get("gpu-0", {}).get("allowMultipleAllocations"))

    devices = await eventually(lambda: published_when(client, offered), 60.0, what="shared and VM devices")
    assert devices["gpu-0"]["consumesCounters"] == devices["gpu-vfio-0"]["consumesCounters"]


async def test_kube_scheduler_never_gives_a_gpu_to_a_vm_and_a_container_at_once(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("l4x4:1", agent_settings={"passthrough_support": True})
    client = cluster.client
    assert client is not None
    await client.apply_object(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    devices = await eventually(
        lambda: published_when(client, lambda d: "gpu-vfio-3" in d), 60.0, what="VM devices published"
    )

    await claim_and_pod(client, "vm", "vfio.gpu.nvidia.com")
    await eventually(lambda: running(client, "vm"), 60.0, what="the VM pod running")
    (result,) = (await client.get_raw(RESOURCE_CLAIMS, "vm", NS))["status"]["allocation"]["devices"][
        "results"
    ]
    bus = bus_of(devices[result["device"]])

    await claim_and_pod(client, "container", "gpu.nvidia.com", bus)

    async def refused() -> set[str]:
        """kube-scheduler's FailedScheduling and gpudra's explanation: the bound GPU's container device is gone."""
        events, _ = await client.list_raw(EVENTS, NS, field_selector="involvedObject.name=container")
        reasons = {e["reason"] for e in events}
        return reasons if {"FailedScheduling", "NoMatchingDevice"} <= reasons else set()

    await eventually(refused, 60.0, what="kube-scheduler refusing the container while the VM holds the GPU")
    assert not (await client.get_raw(PODS, "container", NS))["spec"].get("nodeName")

    await client.delete(PODS, "vm", NS)
    await eventually(lambda: running(client, "container"), 120.0, what="the GPU given to the container after")
    (result,) = (await client.get_raw(RESOURCE_CLAIMS, "container", NS))["status"]["allocation"]["devices"][
        "results"
    ]
    assert bus_of((await published(client))[result["device"]]) == bus
