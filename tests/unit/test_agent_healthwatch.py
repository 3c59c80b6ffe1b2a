"""The agent's health watch on its own: an NVML event taints the device, wakes the loop, warns on the Node, and
the published health reaches the kubelet's stream and the listener (again after a failed report)."""

from __future__ import annotations

import asyncio

from gpudra.agent.healthwatch import HealthWatch
from gpudra.agent.kubeletplugin.messages import HealthStatus
from gpudra.config import AgentSettings
from gpudra.devices.dynamic import build_node_devices
from gpudra.errors import KubeError
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
    assert woken and warnings[0][0] == "GpuHealth" and "XID 79" in warnings[0][1]
    assert set(watch.problems()) == {"gpu-3"}
    assert watch.changed(now=0.0)
    assert not watch.changed(now=0.0)  # once per change

    watch.published(inventory, devices)
    next_report = asyncio.create_task(anext(stream))
    await watch.report()  # the listener fails: reported again next time
    await watch.report()
    assert reported == 2
    await watch.report()
    assert reported == 2  # nothing new to report
    health = {d.device_name: d for d in await asyncio.wait_for(next_report, timeout=10)}
    assert health["gpu-3"].health is HealthStatus.UNHEALTHY and "79" in health["gpu-3"].message
    assert health["gpu-0"].health is HealthStatus.HEALTHY
