"""The seed documents' claim patterns in the embedded cluster: claims from templates, allocation by gpudra's
allocator, pods bound to the node holding the devices, release on pod deletion, and explanations for claims that
cannot be satisfied. The manifests are the ones in examples/seeds/ (the e2e tests apply them with kubectl)."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterkit import StartCluster, client_of, eventually, gpu_claim
from gpudra.cluster.up import EmbeddedCluster
from gpudra.errors import ConflictError
from gpudra.kube.resources import (
    DEPLOYMENTS,
    EVENTS,
    JOBS,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    Resource,
)
from gpudra.testing import watch_until

SEEDS = Path(__file__).resolve().parents[2] / "examples" / "seeds"
KINDS: dict[str, Resource] = {
    "Job": JOBS,
    "Deployment": DEPLOYMENTS,
    "Pod": PODS,
    "ResourceClaim": RESOURCE_CLAIMS,
    "ResourceClaimTemplate": RESOURCE_CLAIM_TEMPLATES,
}
FLEET = "dgx-h100:1,dgx-a100:1,dgx-a100-80gb:1"


@pytest.fixture
async def cluster(start_cluster: StartCluster) -> EmbeddedCluster:
    return await start_cluster(FLEET)


async def apply_file(cluster: EmbeddedCluster, name: str) -> None:
    for doc in yaml.safe_load_all((SEEDS / name).read_text()):
        await client_of(cluster).create(KINDS[doc["kind"]], doc, doc["metadata"]["namespace"])


async def pod(cluster: EmbeddedCluster, name: str) -> dict[str, Any]:
    return await client_of(cluster).get_raw(PODS, name, "default")


async def bound(cluster: EmbeddedCluster, name: str) -> str:
    return str((await pod(cluster, name))["spec"].get("nodeName") or "")


async def claim_of(cluster: EmbeddedCluster, pod_name: str, pod_claim: str) -> dict[str, Any]:
    body = await pod(cluster, pod_name)
    statuses = {
        s["name"]: s.get("resourceClaimName") for s in body.get("status", {}).get("resourceClaimStatuses", [])
    }
    named = {c["name"]: c.get("resourceClaimName") for c in body["spec"]["resourceClaims"]}
    name = statuses.get(pod_claim) or named.get(pod_claim)
    assert name, f"pod {pod_name} has no claim for {pod_claim}"
    return await client_of(cluster).get_raw(RESOURCE_CLAIMS, name, "default")


def devices_of(claim: dict[str, Any]) -> list[tuple[str, str, str]]:
    results = claim["status"]["allocation"]["devices"]["results"]
    return [(r["request"], r["pool"], r["device"]) for r in results]


async def test_template_gives_each_pod_its_own_claim_and_gpu(cluster: EmbeddedCluster) -> None:
    await apply_file(cluster, "01-template-two-pods.yaml")
    node_a = await eventually(lambda: bound(cluster, "trainer-a"))
    node_b = await eventually(lambda: bound(cluster, "trainer-b"))
    assert node_a == node_b == "dgx-h100-0"

    claim_a = await claim_of(cluster, "trainer-a", "training-gpu")
    claim_b = await claim_of(cluster, "trainer-b", "training-gpu")
    assert claim_a["metadata"]["name"].startswith("trainer-a-training-gpu-")
    assert claim_a["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "training-gpu"
    owner = claim_a["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Pod", "trainer-a", True)
    assert devices_of(claim_a) != devices_of(claim_b)
    allocation = claim_a["status"]["allocation"]
    (result,) = allocation["devices"]["results"]
    assert (
        result["driver"] == "gpu.nvidia.com" and result["pool"] == "dgx-h100-0" and result["request"] == "gpu"
    )
    assert allocation["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["dgx-h100-0"]}]}
        ]
    }
    pod_a = await pod(cluster, "trainer-a")
    assert claim_a["status"]["reservedFor"] == [
        {"resource": "pods", "name": "trainer-a", "uid": pod_a["metadata"]["uid"]}
    ]


async def test_a_pod_whose_template_is_missing_waits_for_it_and_says_so(cluster: EmbeddedCluster) -> None:
    """The pod's claim cannot be made while its template does not exist: a Warning Event on the pod names the
    template; once the template is created the claim is made from it and the pod runs."""
    client = client_of(cluster)
    template, *pods = yaml.safe_load_all((SEEDS / "01-template-two-pods.yaml").read_text())
    await client.create(PODS, pods[0], "default")

    async def told() -> list[dict[str, Any]]:
        events, _ = await client.list_raw(EVENTS, "default", field_selector="involvedObject.name=trainer-a")
        return [e for e in events if e["reason"] == "FailedResourceClaimCreation"]

    (event,) = await eventually(told)
    assert event["type"] == "Warning"
    assert event["message"] == (  # a 1.37 kube-controller-manager's words
        'PodResourceClaim training-gpu: resource claim template "training-gpu": resourceclaimtemplate.resource.k8s.io'
        ' "training-gpu" not found'
    )
    assert not await bound(cluster, "trainer-a")

    await client.create(RESOURCE_CLAIM_TEMPLATES, template, "default")
    assert await eventually(lambda: bound(cluster, "trainer-a")) == "dgx-h100-0"
    claim = await claim_of(cluster, "trainer-a", "training-gpu")
    assert claim["metadata"]["name"].startswith("trainer-a-training-gpu-")


async def test_named_claim_shared_by_two_pods_gives_both_the_same_gpu(cluster: EmbeddedCluster) -> None:
    await apply_file(cluster, "02-shared-claim-two-pods.yaml")
    first = await eventually(lambda: bound(cluster, "qwen-inference"))
    second = await eventually(lambda: bound(cluster, "embedding-service"))
    assert first == second
    claim = await client_of(cluster).get_raw(RESOURCE_CLAIMS, "shared-inference-gpu", "default")
    assert len(devices_of(claim)) == 1
    assert {r["name"] for r in claim["status"]["reservedFor"]} == {"qwen-inference", "embedding-service"}


async def test_pods_created_together_around_one_claim_share_one_allocation(cluster: EmbeddedCluster) -> None:
    """Pods are bound in the background: a pod scheduled while the claim's allocation is still being written
    must wait for that write, not allocate the claim a second time (the claim's devices never change)."""
    client = client_of(cluster)
    docs = list(yaml.safe_load_all((SEEDS / "02-shared-claim-two-pods.yaml").read_text()))
    seen: list[list[str]] = []

    # the watch starts from a list made before the claim exists: no write of its allocation can slip past it
    _, version = await client.list_raw(RESOURCE_CLAIMS, "default")

    async def watch_allocations() -> None:
        async for _, body in client.watch(
            RESOURCE_CLAIMS,
            "default",
            resource_version=version,
            field_selector="metadata.name=shared-inference-gpu",
            timeout_seconds=30,
        ):
            allocation = (body.get("status") or {}).get("allocation")
            if allocation and (devices := sorted(d for _, _, d in devices_of(body))) not in seen:
                seen.append(devices)

    watching = asyncio.create_task(watch_allocations())
    await client.create(RESOURCE_CLAIMS, docs[0], "default")
    names = [f"sharer-{i}" for i in range(6)]
    pods = [{**docs[1], "metadata": {"name": n, "namespace": "default"}} for n in names]
    await asyncio.gather(*(client.create(PODS, p, "default") for p in pods))
    nodes = {await eventually(functools.partial(bound, cluster, n)) for n in names}
    claim = await client.get_raw(RESOURCE_CLAIMS, "shared-inference-gpu", "default")
    watching.cancel()
    assert len(nodes) == 1 and nodes == {devices_of(claim)[0][1]}
    assert sorted(r["name"] for r in claim["status"]["reservedFor"]) == names
    assert len(seen) == 1, seen


async def test_mig_slices_of_one_claim_come_from_the_same_gpu(cluster: EmbeddedCluster) -> None:
    await apply_file(cluster, "03-two-containers-one-claim.yaml")
    assert await eventually(lambda: bound(cluster, "mig-inference")) == "dgx-a100-0"
    claim = await claim_of(cluster, "mig-inference", "mig-devices")
    by_request = {request: device for request, _, device in devices_of(claim)}
    assert by_request["large-slice"].startswith("gpu-0-mig-2g10gb-14-")
    assert by_request["small-slice"].startswith("gpu-0-mig-1g5gb-19-")


async def test_two_h100s_in_one_request(cluster: EmbeddedCluster) -> None:
    await apply_file(cluster, "04-two-h100-nvlink.yaml")
    assert await eventually(lambda: bound(cluster, "distributed-training")) == "dgx-h100-0"
    claim = await client_of(cluster).get_raw(RESOURCE_CLAIMS, "training-gpus", "default")
    devices = devices_of(claim)
    assert len(devices) == 2 and len({d for _, _, d in devices}) == 2
    assert {r for r, _, _ in devices} == {"gpus"}


async def test_first_available_falls_back_when_h100s_are_taken(cluster: EmbeddedCluster) -> None:
    client = client_of(cluster)
    template = next(yaml.safe_load_all((SEEDS / "01-template-two-pods.yaml").read_text()))
    await client.create(RESOURCE_CLAIM_TEMPLATES, template, "default")
    for i in range(8):  # take every H100
        body = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"filler-{i}", "namespace": "default"},
            "spec": {"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "training-gpu"}],
                     "containers": [{"name": "c", "image": "busybox"}]},
        }  # fmt: skip
        await client.create(PODS, body, "default")
    for i in range(8):
        await eventually(functools.partial(bound, cluster, f"filler-{i}"))
    await apply_file(cluster, "05-first-available.yaml")
    assert await eventually(lambda: bound(cluster, "flexible-trainer")) == "dgx-a100-80gb-0"
    claim = await claim_of(cluster, "flexible-trainer", "gpu")
    assert [r for r, _, _ in devices_of(claim)] == ["gpu/a100"]


async def test_deleting_pods_frees_devices(cluster: EmbeddedCluster) -> None:
    client = client_of(cluster)
    await apply_file(cluster, "02-shared-claim-two-pods.yaml")
    await eventually(lambda: bound(cluster, "qwen-inference"))
    await eventually(lambda: bound(cluster, "embedding-service"))
    await client.delete(PODS, "qwen-inference", "default")

    async def one_reservation() -> bool:
        claim = await client.get_raw(RESOURCE_CLAIMS, "shared-inference-gpu", "default")
        return [r["name"] for r in claim["status"].get("reservedFor") or []] == ["embedding-service"]

    await eventually(one_reservation)
    await client.delete(PODS, "embedding-service", "default")

    async def deallocated() -> bool:
        claim = await client.get_raw(RESOURCE_CLAIMS, "shared-inference-gpu", "default")
        return not (claim.get("status") or {}).get("allocation")

    await eventually(deallocated)


async def test_an_allocated_claim_that_no_pod_reserves_keeps_its_devices(cluster: EmbeddedCluster) -> None:
    """kube-controller-manager deallocates a claim only when its last pod leaves its reservedFor, never one that
    nobody reserved: the stand-in dropped such a claim's allocation at once, and the next pod took its GPUs."""
    client = client_of(cluster)
    held = await client.create(RESOURCE_CLAIMS, gpu_claim("held", 8), "default")
    results = [
        {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "dgx-h100-0", "device": f"gpu-{i}"}
        for i in range(8)
    ]
    held["status"] = {"allocation": {"devices": {"results": results}}}
    await client.replace(RESOURCE_CLAIMS, held, subresource="status")
    want = gpu_claim("want", 1)
    h100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'
    want["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [{"cel": {"expression": h100}}]
    await client.create(RESOURCE_CLAIMS, want, "default")
    body = {
        "metadata": {"name": "wants-an-h100", "namespace": "default"},
        "spec": {"resourceClaims": [{"name": "g", "resourceClaimName": "want"}],
                 "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "g"}]}}]},
    }  # fmt: skip
    await client.create(PODS, body, "default")
    await watch_until(
        client,
        EVENTS,
        lambda e: e["reason"] == "FailedScheduling",
        namespace="default",
        field_selector="involvedObject.name=wants-an-h100",
    )
    assert not await bound(cluster, "wants-an-h100")
    assert devices_of(await client.get_raw(RESOURCE_CLAIMS, "held", "default")) == [
        ("gpus", "dgx-h100-0", f"gpu-{i}") for i in range(8)
    ]


async def test_unsatisfiable_claim_stays_pending_with_an_explanation(cluster: EmbeddedCluster) -> None:
    client = client_of(cluster)
    await apply_file(cluster, "06-unsatisfiable.yaml")

    async def explained() -> list[dict[str, Any]]:
        events, _ = await client.list_raw(EVENTS, "default", field_selector="involvedObject.name=b300-please")
        return events

    events = await eventually(explained)
    assert events[0]["type"] == "Warning"
    assert "NVIDIA B300" in events[0]["message"] or "NoMatchingDevice" in events[0]["message"]
    await watch_until(
        client,
        EVENTS,
        lambda e: e["reason"] == "FailedScheduling",
        namespace="default",
        field_selector="involvedObject.name=waits-forever",
    )
    assert not await bound(cluster, "waits-forever")
    claim = await client.get_raw(RESOURCE_CLAIMS, "b300-please", "default")
    assert not (claim.get("status") or {}).get("allocation")


async def test_job_and_deployment_pods_get_their_own_claims(cluster: EmbeddedCluster) -> None:
    client = client_of(cluster)
    await apply_file(cluster, "07-job-and-deployment.yaml")

    async def all_bound() -> list[dict[str, Any]]:
        pods, _ = await client.list_raw(PODS, "default")
        return pods if len(pods) == 3 and all(p["spec"].get("nodeName") for p in pods) else []

    pods = await eventually(all_bound)
    by_owner: dict[str, list[str]] = {}
    for p in pods:
        by_owner.setdefault(p["metadata"]["ownerReferences"][0]["kind"], []).append(p["spec"]["nodeName"])
    assert by_owner == {"Job": ["dgx-a100-80gb-0"], "ReplicaSet": ["dgx-a100-0", "dgx-a100-0"]}
    devices = []
    for p in pods:
        claim = await claim_of(
            cluster, p["metadata"]["name"], next(iter(c["name"] for c in p["spec"]["resourceClaims"]))
        )
        devices += [d for _, _, d in devices_of(claim)]
    assert len(devices) == len(set(devices)) == 5


async def test_a_conflict_while_releasing_a_pod_is_retried(cluster: EmbeddedCluster) -> None:
    """A write conflict on the claim while the control plane drops a deleted pod from reservedFor: it writes
    again from the fresh claim, instead of leaving the pod reserved and the device allocated."""
    client = client_of(cluster)
    await apply_file(cluster, "02-shared-claim-two-pods.yaml")
    await eventually(lambda: bound(cluster, "qwen-inference"))
    await eventually(lambda: bound(cluster, "embedding-service"))
    assert cluster.control_plane is not None
    writer = cluster.control_plane.client
    real_replace = writer.replace
    conflicts: list[str] = []

    async def replace_with_one_conflict(res: Any, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        names = [r["name"] for r in (body.get("status") or {}).get("reservedFor") or []]
        if kwargs.get("subresource") == "status" and names == ["embedding-service"] and not conflicts:
            conflicts.append(body["metadata"]["name"])
            raise ConflictError("the object has been modified", status=409)
        replaced: dict[str, Any] = await real_replace(res, body, **kwargs)
        return replaced

    # the ignore below: a fault injected into this one writer
    writer.replace = replace_with_one_conflict  # type: ignore[method-assign,assignment]
    try:
        await client.delete(PODS, "qwen-inference", "default")

        async def one_reservation() -> bool:
            claim = await client.get_raw(RESOURCE_CLAIMS, "shared-inference-gpu", "default")
            return [r["name"] for r in claim["status"].get("reservedFor") or []] == ["embedding-service"]

        await eventually(one_reservation)
    finally:
        # the ignore below: the fault taken out again
        writer.replace = real_replace  # type: ignore[method-assign]
    assert conflicts == ["shared-inference-gpu"]
