"""Extended resources backed by DRA: `nvidia.com/gpu: 2` and per-profile MIG resources keep working, served through a
claim the stand-in scheduler creates per pod, as kube-scheduler 1.34+ does with DRAExtendedResource."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterkit import StartCluster
from gpudra.cluster.up import EmbeddedCluster
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def cluster(start_cluster: StartCluster) -> EmbeddedCluster:
    return await start_cluster("dgx-h100:1,dgx-a100:1")


def pod(name: str, limits: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}]},
    }


async def bound_claim(client: KubeClient, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        body = await client.get(PODS, name, "default")
        status = (body.get("status") or {}).get("extendedResourceClaimStatus")
        if body["spec"].get("nodeName") and status:
            return body, await client.get(RESOURCE_CLAIMS, status["resourceClaimName"], "default")
        await asyncio.sleep(0.05)
    raise AssertionError(f"pod {name} was not bound with an extended-resource claim")


async def test_nvidia_com_gpu_limit_gets_whole_gpus(cluster: EmbeddedCluster) -> None:
    assert cluster.client is not None
    await cluster.client.create(PODS, pod("legacy", {"nvidia.com/gpu": "2", "cpu": "1"}), "default")
    body, claim = await bound_claim(cluster.client, "legacy")
    assert body["spec"]["nodeName"] == "dgx-h100-0"
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
    results = claim["status"]["allocation"]["devices"]["results"]
    assert [r["request"] for r in results] == ["container-0-request-0"] * 2
    assert body["status"]["extendedResourceClaimStatus"]["requestMappings"] == [
        {"containerName": "main", "resourceName": "nvidia.com/gpu", "requestName": "container-0-request-0"}
    ]


async def test_mig_profile_resource_maps_to_its_class(cluster: EmbeddedCluster) -> None:
    assert cluster.client is not None
    for doc in yaml.safe_load_all((ROOT / "examples/extended-resources/mig-classes.yaml").read_text()):
        await cluster.client.create(DEVICE_CLASSES, doc)
    await asyncio.sleep(0.2)  # the scheduler's class cache follows the watch
    await cluster.client.create(PODS, pod("legacy-mig", {"nvidia.com/mig-1g.5gb": "1"}), "default")
    body, claim = await bound_claim(cluster.client, "legacy-mig")
    assert body["spec"]["nodeName"] == "dgx-a100-0"
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert "-mig-1g5gb-" in result["device"]


async def test_pods_without_claims_are_spread_over_nodes(cluster: EmbeddedCluster) -> None:
    assert cluster.client is not None
    for i in range(4):
        await cluster.client.create(PODS, pod(f"plain-{i}", {"cpu": "1"}), "default")
    deadline = time.monotonic() + 15
    nodes: list[str] = []
    while time.monotonic() < deadline:
        pods, _ = await cluster.client.list(PODS, "default")
        nodes = [p["spec"].get("nodeName") or "" for p in pods]
        if all(nodes):
            break
        await asyncio.sleep(0.05)
    assert sorted(nodes) == ["dgx-a100-0", "dgx-a100-0", "dgx-h100-0", "dgx-h100-0"]
