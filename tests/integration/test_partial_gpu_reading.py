"""One GPU never blanks a node, in the agent: an NVML call that fails on one GPU, or answers an architecture gpudra
does not know, leaves the node's other GPUs published, and the Node gets a Warning Event naming the GPU and the
call."""

from __future__ import annotations

import functools
from typing import Any

from clusterkit import StartCluster, client_of, eventually
from gpudra.hardware.simulated import nvml_types as t
from gpudra.kube.resources import EVENTS, RESOURCE_SLICES
from gpudra.testing import watch_until

NODE = "dgx-h100-0"


def said(reason: str, text: str, event: dict[str, Any]) -> bool:
    """An Event with this reason whose message holds this text."""
    return bool(event["reason"] == reason and text in event["message"])


async def test_one_gpu_failing_leaves_the_others_published_with_a_warning(
    start_cluster: StartCluster,
) -> None:
    cluster = await start_cluster("dgx-h100:1", hardware_poll_seconds=0.1)
    assert cluster.client is not None
    fake = cluster.simulated[NODE]
    fake.inject_call("nvmlDeviceGetUUID", gpu=5, error=t.NVMLError_Unknown)
    fake.inject_call("nvmlDeviceGetArchitecture", gpu=2, returns=99)

    async def published() -> dict[str, dict[str, Any]] | None:
        slices, _ = await client_of(cluster).list_raw(RESOURCE_SLICES, field_selector=f"spec.nodeName={NODE}")
        devices = {d["name"]: d for s in slices for d in s["spec"].get("devices") or []}
        return devices if "gpu-5" not in devices and len(devices) == 7 else None

    devices = await eventually(published)
    assert "architecture" not in devices["gpu-2"]["attributes"]
    assert devices["gpu-3"]["attributes"]["architecture"] == {"string": "Hopper"}

    for reason, text in (
        ("GpuNotPublished", "GPU 5: nvmlDeviceGetUUID failed"),
        ("GpuReadingIncomplete", "nvmlDeviceGetArchitecture answered 99"),
    ):
        event = await watch_until(
            cluster.client,
            EVENTS,
            functools.partial(said, reason, text),
            namespace="default",
            field_selector=f"involvedObject.name={NODE}",
        )
        assert event["type"] == "Warning"

    fake.clear_injections()  # the GPU answers again: it is published again
    await eventually(lambda: _has(cluster, "gpu-5"))


async def _has(cluster: Any, name: str) -> bool:
    slices, _ = await cluster.client.list_raw(RESOURCE_SLICES, field_selector=f"spec.nodeName={NODE}")
    return any(d["name"] == name for s in slices for d in s["spec"].get("devices") or [])
