"""GPU health in the agent: an injected XID taints the device on its ResourceSlice and the scheduler stops picking
it; ignored XIDs are tainted with effect None; taints go away when the device is quiet again; a lost GPU leaves the
slice; the Node gets an Event. Claims prepared on a device that turns unhealthy get a Healthy=False condition in
status.devices (and an Event) until it recovers; the kubelet's health stream says the same."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from clusterkit import StartCluster, client_of, eventually
from gpudra.agent.kubeletplugin.kubelet_client import KubeletClient
from gpudra.agent.kubeletplugin.messages import HealthStatus
from gpudra.cluster.up import EmbeddedCluster
from gpudra.hardware.simulated import FakeNvml
from gpudra.kube.resources import EVENTS, PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, RESOURCE_SLICES
from gpudra.testing import watch_until


async def devices(cluster: EmbeddedCluster, node: str) -> dict[str, dict[str, Any]]:
    assert cluster.client is not None
    slices, _ = await cluster.client.list_raw(RESOURCE_SLICES, field_selector=f"spec.nodeName={node}")
    return {d["name"]: d for s in slices for d in s["spec"].get("devices") or []}


async def inject(fake: FakeNvml, gpu: int, xid: int) -> None:
    """Inject once the agent's health thread listens (an event nobody waits for is lost, as in NVML)."""
    await eventually(lambda: fake.inject_xid(gpu, xid) > 0)


@pytest.fixture
async def cluster(start_cluster: StartCluster) -> EmbeddedCluster:
    return await start_cluster("dgx-h100:1,dgx-a100:1", hardware_poll_seconds=0.1)


async def test_xid_taints_the_gpu_and_recovers(cluster: EmbeddedCluster) -> None:
    agent = cluster.agents["dgx-h100-0"]
    agent.health.state.recovery_seconds = 1.0
    await inject(cluster.simulated["dgx-h100-0"], 3, 79)

    async def tainted() -> list[dict[str, Any]]:
        return list((await devices(cluster, "dgx-h100-0"))["gpu-3"].get("taints") or [])

    (taint,) = await eventually(tainted)
    assert (taint["key"], taint["value"], taint["effect"]) == ("gpu.nvidia.com/xid", "79", "NoSchedule")
    await event_on(cluster, "dgx-h100-0", "GpuHealth", "XID 79")  # the Event follows the taint

    async def recovered() -> bool:
        return not (await devices(cluster, "dgx-h100-0"))["gpu-3"].get("taints")

    await eventually(recovered)


async def test_a_simulated_node_follows_its_gpus_health_without_a_thread(cluster: EmbeddedCluster) -> None:
    """The simulated NVML tells the agent's event loop when an event came: no thread a node blocked in the event
    wait (a fleet of thousands of simulated nodes in one process ran thousands of them)."""
    assert not [t.name for t in threading.enumerate() if t.name.startswith("health-")]
    await inject(cluster.simulated["dgx-h100-0"], 2, 48)

    async def tainted() -> list[dict[str, Any]]:
        return list((await devices(cluster, "dgx-h100-0"))["gpu-2"].get("taints") or [])

    (taint,) = await eventually(tainted)
    assert (taint["key"], taint["value"]) == ("gpu.nvidia.com/xid", "48")


async def event_on(cluster: EmbeddedCluster, name: str, reason: str, text: str = "") -> dict[str, Any]:
    """The first Event on ``name`` (in default) with this reason and ``text`` in its message (waits for it)."""
    assert cluster.client is not None
    return await watch_until(
        cluster.client,
        EVENTS,
        lambda e: e["reason"] == reason and text in e["message"],
        namespace="default",
        field_selector=f"involvedObject.name={name}",
    )


async def health_event(cluster: EmbeddedCluster, node: str, text: str) -> dict[str, Any] | None:
    assert cluster.client is not None
    events, _ = await cluster.client.list_raw(EVENTS, "default", field_selector=f"involvedObject.name={node}")
    return next((e for e in events if e["reason"] == "GpuHealth" and text in e["message"]), None)


async def test_ignored_xid_is_visible_but_does_not_repel(cluster: EmbeddedCluster) -> None:
    """The embedded API server is Kubernetes 1.37, which knows the taint effect None (1.35+): the ignored XID is a
    taint with effect None on the GPU, which nothing is repelled by."""
    await inject(cluster.simulated["dgx-h100-0"], 0, 13)
    event = await eventually(lambda: health_event(cluster, "dgx-h100-0", "XID 13"))
    assert event["message"].endswith("taint effect None")

    async def published() -> list[dict[str, Any]] | None:
        return (await devices(cluster, "dgx-h100-0"))["gpu-0"].get("taints")

    (taint,) = await eventually(published)
    assert (taint["key"], taint["value"], taint["effect"]) == ("gpu.nvidia.com/xid", "13", "None")


async def test_on_1_34_an_ignored_xid_is_told_on_the_node_only(start_cluster: StartCluster) -> None:
    """Kubernetes 1.34 does not know the taint effect None: the ignored XID is told on the Node and left out of the
    slice (which 1.34 would refuse whole), so nothing repels the GPU."""
    cluster = await start_cluster("dgx-h100:1", hardware_poll_seconds=0.1, kubernetes_version="1.34")
    await inject(cluster.simulated["dgx-h100-0"], 0, 13)
    event = await eventually(lambda: health_event(cluster, "dgx-h100-0", "XID 13"))
    assert event["message"].endswith("taint effect None")
    await inject(cluster.simulated["dgx-h100-0"], 1, 79)  # a repelling XID after it: published once handled

    async def published() -> dict[str, dict[str, Any]] | None:
        found = await devices(cluster, "dgx-h100-0")
        return found if found["gpu-1"].get("taints") else None

    assert not (await eventually(published))["gpu-0"].get("taints")


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
    assert cluster.control_plane is not None
    slices = cluster.control_plane.state.slices.cache

    def scheduler_sees_the_taint() -> bool:
        return any(
            d["name"] == "gpu-0" and d.get("taints")
            for s in slices.values()
            if s["spec"].get("nodeName") == "dgx-h100-0"
            for d in s["spec"].get("devices") or []
        )

    await eventually(lambda: scheduler_sees_the_taint())
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
        body = await client_of(cluster).get_raw(RESOURCE_CLAIMS, "one-gpu", "default")
        return list(
            ((body.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
        )

    (result,) = await eventually(allocated)
    assert (result["pool"], result["device"]) == ("dgx-h100-0", "gpu-1")


async def running_claim(cluster: EmbeddedCluster, name: str) -> tuple[str, str, int]:
    """A pod running with a one-GPU claim: (node, device, the GPU's index in the simulator)."""
    assert cluster.client is not None
    claim = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
    }  # fmt: skip
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-pod", "namespace": "default"},
        "spec": {"resourceClaims": [{"name": "g", "resourceClaimName": name}],
                 "containers": [{"name": "c", "image": "cuda", "resources": {"claims": [{"name": "g"}]}}]},
    }  # fmt: skip
    await cluster.client.create(RESOURCE_CLAIMS, claim, "default")
    await cluster.client.create(PODS, pod, "default")

    async def running() -> bool:
        body = await client_of(cluster).get_raw(PODS, f"{name}-pod", "default")
        return (body.get("status") or {}).get("phase") == "Running"

    await eventually(running)
    (entry,) = (await eventually(lambda: claim_devices(cluster, name))).values()  # written after the answer
    node, device = entry["pool"], entry["device"]
    inventory = cluster.agents[node].inventory
    assert inventory is not None
    (index,) = [g.index for g in inventory.gpus if g.uuid == entry["data"]["uuid"]]
    return node, device, index


async def claim_devices(cluster: EmbeddedCluster, name: str) -> dict[str, dict[str, Any]]:
    assert cluster.client is not None
    body = await cluster.client.get_raw(RESOURCE_CLAIMS, name, "default")
    return {e["device"]: e for e in (body.get("status") or {}).get("devices") or []}


async def healthy_condition(cluster: EmbeddedCluster, name: str, device: str) -> dict[str, Any]:
    entry = (await claim_devices(cluster, name))[device]
    return next(c for c in entry["conditions"] if c["type"] == "Healthy")


async def test_xid_marks_the_prepared_claim_unhealthy_until_the_device_recovers(
    cluster: EmbeddedCluster,
) -> None:
    node, device, index = await running_claim(cluster, "train")
    assert (await healthy_condition(cluster, "train", device))["status"] == "True"
    cluster.agents[node].health.state.recovery_seconds = 1.0
    await inject(cluster.simulated[node], index, 79)

    async def unhealthy() -> dict[str, Any] | None:
        condition = await healthy_condition(cluster, "train", device)
        return condition if condition["status"] == "False" else None

    condition = await eventually(unhealthy)
    assert condition["reason"] == "Xid79"
    assert "XID 79" in condition["message"]
    entry = (await claim_devices(cluster, "train"))[device]
    ready = next(c for c in entry["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"  # still prepared; the pod keeps its device
    await event_on(cluster, "train", "DeviceUnhealthy", "XID 79")

    async def recovered() -> bool:
        return str((await healthy_condition(cluster, "train", device))["status"]) == "True"

    await eventually(recovered)
    await event_on(cluster, "train", "DeviceRecovered")


async def test_ignored_xid_leaves_the_prepared_claim_healthy(cluster: EmbeddedCluster) -> None:
    node, device, index = await running_claim(cluster, "infer")
    await inject(cluster.simulated[node], index, 13)
    await eventually(
        lambda: health_event(cluster, node, "XID 13")
    )  # recorded by the agent (a taint with effect None, which repels nothing)
    preparer = cluster.runtimes[node].preparer
    assert preparer is not None
    await preparer.report_health()  # whatever the agent reports next, it is this
    condition = await healthy_condition(cluster, "infer", device)
    assert (condition["status"], condition["reason"]) == ("True", "Healthy")


async def test_lost_gpu_marks_its_prepared_claim(cluster: EmbeddedCluster) -> None:
    node, device, index = await running_claim(cluster, "lost")
    cluster.simulated[node].lose_gpu(index)

    async def marked() -> dict[str, Any] | None:
        condition = await healthy_condition(cluster, "lost", device)
        return condition if condition["status"] == "False" else None

    condition = await eventually(marked)
    assert condition["reason"] == "GpuLost"


async def test_health_stream_reports_the_unhealthy_device(cluster: EmbeddedCluster) -> None:
    runtime = cluster.runtimes["dgx-h100-0"]
    assert runtime.plugin is not None
    async with KubeletClient(runtime.plugin.registration_socket) as kubelet:
        await kubelet.register()
        stream = kubelet.watch_health()
        first = {d.device_name: d.health for d in await anext(stream)}
        assert first["gpu-2"] == HealthStatus.HEALTHY and len(first) == 8
        await inject(cluster.simulated["dgx-h100-0"], 2, 48)
        while True:
            update = {d.device_name: d.health for d in await anext(stream)}
            if update["gpu-2"] == HealthStatus.UNHEALTHY:
                break
        assert update["gpu-3"] == HealthStatus.HEALTHY
        await stream.aclose()


async def test_health_stream_repeats_itself_before_the_kubelet_times_it_out(
    start_cluster: StartCluster,
) -> None:
    """A real kubelet reads a device as Unknown once no report named it for health_check_timeout_seconds,
    counted from when the report arrived: the stream repeats every device's health without a change, sooner
    than the timeout it announces, and says why a device is unhealthy."""
    cluster = await start_cluster("dgx-h100:1", agent_settings={"health_report_seconds": 0.3})
    runtime = cluster.runtimes["dgx-h100-0"]
    assert runtime.plugin is not None
    async with KubeletClient(runtime.plugin.registration_socket) as kubelet:
        await kubelet.register()
        stream = kubelet.watch_health()
        first = await anext(stream)
        assert {d.health_check_timeout_seconds for d in first} == {1}
        await inject(cluster.simulated["dgx-h100-0"], 5, 79)
        while True:
            report = {d.device_name: d for d in await anext(stream)}
            if report["gpu-5"].health == HealthStatus.UNHEALTHY:
                break
        assert "XID 79" in report["gpu-5"].message and report["gpu-4"].message == ""
        repeated = {d.device_name: d for d in await asyncio.wait_for(anext(stream), 5)}
        assert repeated["gpu-5"].health == HealthStatus.UNHEALTHY and len(repeated) == len(report)
        await stream.aclose()


async def test_an_xid_shows_in_the_pods_allocated_resources_status(start_cluster: StartCluster) -> None:
    """The stand-in kubelet writes what a 1.37 kubelet writes from the health stream (the same test runs against
    a real kubelet in tests/kubernetes/test_real_kubelet.py): one entry per claim reference, the device by its
    CDI id, Healthy, then Unhealthy with the XID in the message."""
    cluster = await start_cluster("dgx-h100:1", agent_settings={"health_report_seconds": 0.3})
    assert cluster.client is not None
    template = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
        ]}}},
    }  # fmt: skip
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "infer", "namespace": "default"},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                 "containers": [{"name": "c", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}]},
    }  # fmt: skip
    await cluster.client.create(RESOURCE_CLAIM_TEMPLATES, template, "default")
    await cluster.client.create(PODS, pod, "default")

    async def reported(wanted: str) -> dict[str, Any] | None:
        body = await client_of(cluster).get_raw(PODS, "infer", "default")
        (status,) = (body.get("status") or {}).get("containerStatuses") or [{}]
        entries = status.get("allocatedResourcesStatus") or []
        resources = [r for e in entries for r in e["resources"]]
        if len(resources) == 1 and resources[0]["health"] == wanted:
            assert [e["name"] for e in entries] == ["claim:gpu"]
            return dict(resources[0])
        return None

    healthy = await eventually(lambda: reported("Healthy"))
    body = await cluster.client.get_raw(PODS, "infer", "default")
    (claim_name,) = [s["resourceClaimName"] for s in body["status"]["resourceClaimStatuses"]]
    (entry,) = (await eventually(lambda: claim_devices(cluster, claim_name))).values()
    assert healthy == {"resourceID": entry["data"]["cdiDeviceIDs"][0], "health": "Healthy"}
    node, uuid = entry["pool"], entry["data"]["uuid"]
    inventory = cluster.agents[node].inventory
    assert inventory is not None
    (index,) = [g.index for g in inventory.gpus if g.uuid == uuid]
    await inject(cluster.simulated[node], index, 79)
    unhealthy = await eventually(lambda: reported("Unhealthy"))
    assert unhealthy["resourceID"] == healthy["resourceID"]
    assert "XID 79" in unhealthy["message"]
