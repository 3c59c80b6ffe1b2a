"""Crashes on the real control plane: kube-apiserver killed and restarted in the middle of 200 claims. Every
claim ends allocated or pending with a reason, and no device is held twice."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

from _realkit import StartKubernetes, claims, events_of, held_devices, phase, pods, results

from clusterkit import eventually, kubectl

PODS = 200
TEMPLATE = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: default}
spec:
  spec:
    devices:
      requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]
"""


def pod(i: int) -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: worker-{i:03d}, namespace: default}}
spec:
  containers: [{{name: main, image: cuda, resources: {{claims: [{{name: gpu}}]}}}}]
  resourceClaims: [{{name: gpu, resourceClaimTemplateName: one-gpu}}]
"""


async def apply_until_accepted(cluster: object, manifest: str) -> None:
    """kubectl apply, again while the API server is down (apply is idempotent, as a user's retry is)."""
    while True:
        # the ignore below: the real cluster, typed as object by this helper's callers
        out = await kubectl(cluster, "apply", "-f", "-", stdin=manifest, check=False)  # type: ignore[arg-type]
        if "error" not in out.lower() and "refused" not in out.lower():
            return
        await asyncio.sleep(0.5)


def assert_leftover_holds_nothing_lost(claim: dict[str, Any], current: dict[str, dict[str, Any]]) -> None:
    """A claim no pod's status names. kube-controller-manager creates a pod's claim twice when kube-apiserver dies
    between storing the first and answering; it may then name the first in the pod's status, and later, its pod
    cache behind, switch it to the second (the race of kubernetes/kubernetes#140217). The scheduler may have
    allocated the first meanwhile, and the pod runs with it. So a leftover may hold a device only reserved for the
    pod that owns it, running: that device is in use and goes with the pod. One held for no pod, or for another
    pod, is lost."""
    if not results(claim):
        return
    owners = [r["uid"] for r in claim["metadata"].get("ownerReferences") or [] if r.get("controller")]
    reserved = [r.get("uid") for r in (claim.get("status") or {}).get("reservedFor") or []]
    running = {p["metadata"]["uid"] for p in current.values() if phase(p) == "Running"}
    assert reserved == owners and set(owners) <= running, (
        "a leftover claim holds a device for no pod of its own that runs",
        claim["metadata"]["name"],
        owners,
        reserved,
    )


async def test_apiserver_killed_in_the_middle_of_200_claims(start_kubernetes: StartKubernetes) -> None:
    cluster = await start_kubernetes("dgx-h100:20")  # 160 GPUs for 200 single-GPU pods
    assert cluster.kubernetes is not None
    await kubectl(cluster, "apply", "-f", "-", stdin=TEMPLATE)
    first = "---".join(pod(i) for i in range(PODS // 2))
    second = "---".join(pod(i) for i in range(PODS // 2, PODS))
    await kubectl(cluster, "apply", "-f", "-", stdin=first)

    async def some_allocated() -> bool:
        return any(results(c) for c in (await claims(cluster)).values())

    await eventually(some_allocated, timeout=60)
    restarting = asyncio.create_task(cluster.kubernetes.restart_apiserver(kill=True))
    await apply_until_accepted(cluster, second)
    await restarting

    counts: list[tuple[int, int, int, int]] = []

    async def settled() -> bool:
        """All pods exist with their claims, 160 claims allocated and their 160 pods Running."""
        current = await pods(cluster)
        everything = await claims(cluster)
        referenced = {
            s["resourceClaimName"]
            for p in current.values()
            for s in (p.get("status") or {}).get("resourceClaimStatuses") or []
            if s.get("resourceClaimName") in everything
        }
        allocated = sum(1 for c in everything.values() if results(c))
        running = sum(1 for p in current.values() if phase(p) == "Running")
        counts.append((len(current), len(referenced), allocated, running))
        return counts[-1] == (PODS, PODS, 160, 160)

    try:
        await eventually(settled, timeout=240)
    except AssertionError:
        raise AssertionError(f"pods, their claims, allocated, running: {counts[-1]}") from None
    everything = await claims(cluster)
    current = await pods(cluster)
    names = {s["resourceClaimName"] for p in current.values()
             for s in (p.get("status") or {}).get("resourceClaimStatuses") or []}  # fmt: skip
    leftovers = [name for name in everything if name not in names]
    for name in leftovers:
        assert_leftover_holds_nothing_lost(everything[name], current)
    assert all(n == 1 for n in held_devices(everything).values()), "a device is held by two claims"
    waiting = [name for name, p in current.items() if phase(p) != "Running"]
    assert len(waiting) == PODS - 160
    for name in waiting[:5]:
        reasons = {e["reason"] for e in await events_of(cluster, name)}
        assert "FailedScheduling" in reasons, (name, reasons)
    pending_claims = [
        everything[s["resourceClaimName"]]
        for name in waiting
        for s in (current[name].get("status") or {}).get("resourceClaimStatuses") or []
    ]
    assert all(not results(c) for c in pending_claims)

    async def explained() -> bool:
        for claim in pending_claims[:5]:
            if not any(e["type"] == "Warning" for e in await events_of(cluster, claim["metadata"]["name"])):
                return False
        return True

    await eventually(explained, timeout=60)


async def test_control_plane_processes_that_die_are_started_again(start_kubernetes: StartKubernetes) -> None:
    """kube-apiserver, kube-scheduler and kube-controller-manager killed from outside (as the OOM killer would) are
    started again, as the kubelet restarts static pods: a pod created afterwards gets its claim, a node, and runs."""
    cluster = await start_kubernetes("l4x4:1")
    plane = cluster.kubernetes
    assert plane is not None
    processes = [plane.apiserver, plane.scheduler, plane.controller_manager]
    before = []
    for managed in processes:
        assert managed is not None and managed.process is not None
        before.append(managed.process.pid)
        os.kill(managed.process.pid, signal.SIGKILL)

    def all_back() -> bool:
        return all(m is not None and m.restarts >= 1 and m.running for m in processes)

    await eventually(all_back, timeout=180, what="the control plane started again")
    assert [m.process.pid for m in processes if m is not None and m.process is not None] != before
    await apply_until_accepted(cluster, TEMPLATE + "---" + pod(0))

    async def running() -> bool:
        return phase((await pods(cluster)).get("worker-000") or {}) == "Running"

    await eventually(running, timeout=120, what="a pod scheduled and running after the restarts")
