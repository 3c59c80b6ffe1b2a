"""The agent's health watch on its own: an NVML event taints the device, wakes the loop, warns on the Node, and
the published health reaches the kubelet's stream and the listener (again after a failed report)."""

from __future__ import annotations

import asyncio

from gpudra.agent.healthwatch import HealthWatch, event_subject
from gpudra.agent.kubeletplugin.messages import HealthStatus
from gpudra.config import AgentSettings
from gpudra.devices.dynamic import build_node_devices
from gpudra.errors import KubeError
from gpudra.hardware.gpus.backend import HealthEvent, HealthEventKind
from gpudra.hardware.simulated import simulated_backend
from gpudra.testing import eventually

NODE = "n1"


async def test_an_xid_is_published_reported_and_warned_about() -> None:
    node = simulated_backend("dgx-h100", NODE)
    inventory = node.backend.read_inventory()
    devices = build_node_devices(inventory, {}).devices
    settings = AgentSettings(node_name=NODE, backend="simulated", hardware_poll_seconds=0.1)
    woken: list[bool] = []
    warnings: list[tuple[str, str]] = []

    async def warn(reason: str, message: str) -> None:
        warnings.append((reason, message))

    watch = HealthWatch(settings, node.backend, wake=lambda: woken.append(True), warn=warn)
    reported = 0

    async def listener() -> None:
        nonlocal reported
        reported += 1
        if reported == 1:
            raise KubeError("the API server is away")

    watch.listener = listener
    watch.published(inventory, devices)
    stream = watch.reports()
    first = await anext(stream)
    assert {d.device_name for d in first} == {d.name for d in devices}
    assert all(d.health is HealthStatus.HEALTHY for d in first)

    watch.start()
    try:
        await eventually(lambda: node.nvml.inject_xid(3, 79) > 0)
        await eventually(lambda: bool(warnings))
    finally:
        watch.stop()
    assert woken and warnings[0][0] == "GpuHealth"
    gpu3 = next(gpu for gpu in inventory.gpus if gpu.index == 3)
    assert (
        warnings[0][1] == f"gpu-3 ({gpu3.uuid}): XID 79; taint effect NoSchedule"
    )  # as claims name it, and NVML
    assert set(watch.problems()) == {"gpu-3"}
    assert watch.changed(now=0.0)
    assert not watch.changed(now=0.0)  # once per change

    watch.published(inventory, devices)
    next_report = asyncio.ensure_future(anext(stream))
    await watch.report()  # the listener fails: reported again next time
    await watch.report()
    assert reported == 2
    await watch.report()
    assert reported == 2  # nothing new to report
    health = {d.device_name: d for d in await asyncio.wait_for(next_report, timeout=10)}
    assert health["gpu-3"].health is HealthStatus.UNHEALTHY and "79" in health["gpu-3"].message
    assert health["gpu-0"].health is HealthStatus.HEALTHY


def test_an_event_names_its_device_as_claims_do_and_its_uuid_as_nvml_does() -> None:
    inventory = simulated_backend("dgx-a100", NODE).backend.read_inventory()  # all-balanced MIG
    gpu1 = next(gpu for gpu in inventory.gpus if gpu.index == 1)
    mig = next(m for m in gpu1.mig_devices if m.profile == "2g.10gb")
    on_mig = HealthEvent(kind=HealthEventKind.XID, gpu_index=1, gpu_uuid=gpu1.uuid, xid=94, gi_id=mig.gi_id)
    expected = f"gpu-1-mig-2g10gb-14-{mig.placement_start} ({gpu1.uuid} MIG GI {mig.gi_id})"
    assert event_subject(on_mig, inventory) == expected
    lost = HealthEvent(kind=HealthEventKind.GPU_LOST, gpu_index=7, gpu_uuid="GPU-gone")
    assert event_subject(lost, inventory) == "GPU GPU-gone"  # no longer read: its UUID is all there is
    unnamed = HealthEvent(kind=HealthEventKind.XID, gpu_index=None, gpu_uuid=None, xid=79)
    assert event_subject(unnamed, inventory) == "a GPU NVML did not name"
