"""Extended resources backed by DRA: `nvidia.com/gpu: 2`, per-profile MIG resources and time-sliced
`nvidia.com/gpu.shared` keep working, served through a claim the stand-in scheduler creates per pod, as kube-scheduler
1.34+ does with DRAExtendedResource."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterkit import StartCluster, client_of, eventually
from gpudra.cluster.up import EmbeddedCluster
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import DEVICE_CLASSES, EVENTS, PODS, RESOURCE_CLAIMS

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
    """The pod once bound with its extended-resource claim, and that claim."""

    async def bound() -> tuple[dict[str, Any], dict[str, Any]] | None:
        body = await client.get_raw(PODS, name, "default")
        status = (body.get("status") or {}).get("extendedResourceClaimStatus")
        if body["spec"].get("nodeName") and status:
            return body, await client.get_raw(RESOURCE_CLAIMS, status["resourceClaimName"], "default")
        return None

    return await eventually(bound, what=f"pod {name} bound with an extended-resource claim")


async def unschedulable(client: KubeClient, name: str) -> None:
    """The scheduler tried the pod and said why it cannot place it; the pod stays unbound."""

    async def failed() -> bool:
        events, _ = await client.list_raw(EVENTS, "default", field_selector=f"involvedObject.name={name}")
        return any(e["reason"] == "FailedScheduling" for e in events)

    await eventually(failed)
    assert not (await client.get_raw(PODS, name, "default"))["spec"].get("nodeName")


async def scheduler_knows_classes(cluster: EmbeddedCluster, *names: str) -> None:
    """The stand-in scheduler's class cache (its watch) holds these DeviceClasses."""
    assert cluster.control_plane is not None
    cache = cluster.control_plane.state.classes.cache
    await eventually(lambda: all(("", n) in cache for n in names))


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
    docs = list(yaml.safe_load_all((ROOT / "examples/extended-resources/mig-classes.yaml").read_text()))
    for doc in docs:
        await cluster.client.create(DEVICE_CLASSES, doc)
    await scheduler_knows_classes(cluster, *(d["metadata"]["name"] for d in docs))
    await cluster.client.create(PODS, pod("legacy-mig", {"nvidia.com/mig-1g.5gb": "1"}), "default")
    body, claim = await bound_claim(cluster.client, "legacy-mig")
    assert body["spec"]["nodeName"] == "dgx-a100-0"
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert "-mig-1g5gb-" in result["device"]


async def test_pods_without_claims_are_spread_over_nodes(cluster: EmbeddedCluster) -> None:
    assert cluster.client is not None
    for i in range(4):
        await cluster.client.create(PODS, pod(f"plain-{i}", {"cpu": "1"}), "default")
    client = cluster.client

    async def all_bound() -> list[str]:
        pods, _ = await client.list_raw(PODS, "default")
        nodes = [p["spec"].get("nodeName") or "" for p in pods]
        return nodes if all(nodes) else []

    nodes = await eventually(all_bound)
    assert sorted(nodes) == ["dgx-a100-0", "dgx-a100-0", "dgx-h100-0", "dgx-h100-0"]


async def test_shared_gpu_resource_puts_several_pods_on_one_time_sliced_gpu(
    start_cluster: StartCluster,
) -> None:
    cluster = await start_cluster("dgx-h100:1,l4x4:1", agent_overrides={"l4x4": {"shared_gpu_replicas": 2}})
    assert cluster.client is not None
    docs = list(yaml.safe_load_all((ROOT / "examples/extended-resources/time-sliced-gpus.yaml").read_text()))
    await cluster.client.create(DEVICE_CLASSES, docs[0])
    await scheduler_knows_classes(cluster, docs[0]["metadata"]["name"])
    placed: list[tuple[str, str, str]] = []
    for i in range(8):  # 4 L4s x 2 replicas
        await cluster.client.create(PODS, pod(f"shared-{i}", {"nvidia.com/gpu.shared": "1"}), "default")
        body, claim = await bound_claim(cluster.client, f"shared-{i}")
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert result["shareID"] and result["consumedCapacity"]["memory"] == "11517Mi"
        placed.append((body["spec"]["nodeName"], result["device"], result["shareID"]))
    assert {node for node, _, _ in placed} == {"l4x4-0"}
    per_gpu = {d: sum(1 for _, dd, _ in placed if dd == d) for _, d, _ in placed}
    assert per_gpu == {"gpu-0": 2, "gpu-1": 2, "gpu-2": 2, "gpu-3": 2}

    async def all_running() -> bool:  # the agent prepares one GPU for two claims
        pods, _ = await client_of(cluster).list_raw(PODS, "default")
        return sum(bool((p.get("status") or {}).get("phase") == "Running") for p in pods) == 8

    await eventually(all_running)
    # a ninth tenant does not fit: every share is taken
    await cluster.client.create(PODS, pod("shared-8", {"nvidia.com/gpu.shared": "1"}), "default")
    await unschedulable(cluster.client, "shared-8")


async def test_exclusive_gpu_requests_never_land_on_shared_gpus(start_cluster: StartCluster) -> None:
    cluster = await start_cluster("l4x4:1", agent_overrides={"l4x4": {"shared_gpu_replicas": 2}})
    assert cluster.client is not None
    await cluster.client.create(PODS, pod("exclusive", {"nvidia.com/gpu": "1"}), "default")
    await unschedulable(cluster.client, "exclusive")
