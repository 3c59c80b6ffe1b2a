"""What kube-scheduler makes of what gpudra publishes: device taints from GPU health keep new claims off a
sick GPU, and `nvidia.com/gpu: N` pods get GPUs through the DeviceClass's extendedResourceName."""

from __future__ import annotations

from _realkit import StartKubernetes, claims, events_of, phase, pods, results

from clusterkit import eventually, kubectl
from gpudra.kube.resources import RESOURCE_SLICES

ALL_EIGHT = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: all-eight, namespace: default}
spec:
  devices:
    requests: [{name: gpus, exactly: {deviceClassName: gpu.nvidia.com, allocationMode: All}}]
---
apiVersion: v1
kind: Pod
metadata: {name: wants-all-eight, namespace: default}
spec:
  containers: [{name: main, image: cuda, resources: {claims: [{name: gpus}]}}]
  resourceClaims: [{name: gpus, resourceClaimName: all-eight}]
"""


def gpu_pods(count: int, gpus: int) -> str:
    return "\n---\n".join(
        f"""
apiVersion: v1
kind: Pod
metadata: {{name: legacy-{i}, namespace: default}}
spec:
  containers: [{{name: main, image: cuda, resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}}}]
"""
        for i in range(count)
    )


async def test_a_health_taint_keeps_kube_scheduler_off_the_gpu_until_it_recovers(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("dgx-h100:1")
    agent = cluster.agents["dgx-h100-0"]
    agent.health.state.recovery_seconds = 3.0
    fake = cluster.simulated["dgx-h100-0"]
    await eventually(lambda: fake.inject_xid(5, 79) > 0)

    async def tainted() -> bool:
        slices, _ = await cluster.client.list_raw(RESOURCE_SLICES) if cluster.client else ([], "")
        return any(
            d["name"] == "gpu-5" and d.get("taints") for s in slices for d in s["spec"].get("devices") or []
        )

    await eventually(tainted, timeout=30)
    await kubectl(cluster, "apply", "-f", "-", stdin=ALL_EIGHT)

    async def refused() -> bool:
        return any(e["reason"] == "FailedScheduling" for e in await events_of(cluster, "wants-all-eight"))

    await eventually(refused, timeout=30)
    assert phase((await pods(cluster))["wants-all-eight"]) == "Pending"

    async def running_after_recovery() -> bool:
        return phase((await pods(cluster))["wants-all-eight"]) == "Running"

    await eventually(running_after_recovery, timeout=60)
    assert len(results((await claims(cluster))["all-eight"])) == 8


async def test_nvidia_com_gpu_requests_are_served_through_the_device_class(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("dgx-h100:1,l4x4:1")
    await kubectl(cluster, "apply", "-f", "-", stdin=gpu_pods(4, 4))  # room for three: 8 H100s and 4 L4s

    async def three_running_one_pending() -> bool:
        phases = sorted(phase(p) for p in (await pods(cluster)).values())
        return phases == ["Pending", "Running", "Running", "Running"]

    await eventually(three_running_one_pending, timeout=60)
    current = await pods(cluster)
    held = [r for c in (await claims(cluster)).values() for r in results(c)]
    assert len(held) == 12 and len({(r["pool"], r["device"]) for r in held}) == 12
    running = {p["spec"]["nodeName"] for p in current.values() if phase(p) == "Running"}
    assert running <= {"dgx-h100-0", "l4x4-0"}
    statuses = [
        p["status"].get("extendedResourceClaimStatus") for p in current.values() if phase(p) == "Running"
    ]
    assert all(s and s["resourceClaimName"] for s in statuses), statuses
