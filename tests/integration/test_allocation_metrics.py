"""Allocation metrics a dashboard can use instead of nvidia_com_gpu: one series per allocated device with
dcgm-exporter's dra_* labels and the pod, and allocated vs published GPU resources per node."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import yaml

from clusterkit import StartCluster
from gpudra.kube.resources import PODS, RESOURCE_CLAIM_TEMPLATES

SEED = Path(__file__).resolve().parents[2] / "examples" / "seeds" / "03-two-containers-one-claim.yaml"


async def test_allocated_mig_devices_are_attributed_to_their_pod(start_cluster: StartCluster) -> None:
    cluster = await start_cluster("dgx-a100:1")
    assert cluster.client is not None
    template, pod = yaml.safe_load_all(SEED.read_text())
    await cluster.client.create(RESOURCE_CLAIM_TEMPLATES, template, "default")
    await cluster.client.create(PODS, pod, "default")
    sample = cluster.metrics.registry.get_sample_value
    deadline = time.monotonic() + 20
    while sample("gpudra_node_allocated", {"node": "dgx-a100-0", "resource": "devices"}) != 2.0:
        assert time.monotonic() < deadline, "allocation metrics did not appear"
        await asyncio.sleep(0.1)
    series = [
        s.labels
        for metric in cluster.metrics.registry.collect()
        if metric.name == "gpudra_device_allocated"
        for s in metric.samples
        if s.value == 1
    ]
    assert {s["dra_mig_profile"] for s in series} == {"2g.10gb", "1g.5gb"}
    assert {(s["pod"], s["namespace"], s["dra_pool_name"], s["dra_driver_name"]) for s in series} == {
        ("mig-inference", "default", "dgx-a100-0", "gpu.nvidia.com")
    }
    assert all(
        s["dra_mig_device_uuid"].startswith("MIG-") and s["gpu_uuid"].startswith("GPU-") for s in series
    )
    assert sample("gpudra_node_capacity", {"node": "dgx-a100-0", "resource": "devices"}) == 32.0
    assert sample("gpudra_node_allocated", {"node": "dgx-a100-0", "resource": "memory_slices"}) == 3.0
