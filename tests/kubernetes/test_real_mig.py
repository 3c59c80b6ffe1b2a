"""MIG on the real control plane: a MigLayout repartitions a node through the agent's own (node-bound)
credentials, a prepared claim blocks it until its pod is gone, and dynamic MIG instances are created when
kube-scheduler's allocation reaches the node and destroyed when the pod is deleted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _realkit import StartKubernetes, admin, claims, phase, pods, results

from clusterkit import eventually, kubectl
from gpudra.controller.miglayouts import MIGLAYOUTS
from gpudra.kube.resources import RESOURCE_SLICES

ROOT = Path(__file__).resolve().parents[2]
HOLDER = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: small, namespace: default}
spec:
  devices:
    requests: [{name: mig, exactly: {deviceClassName: mig.nvidia.com}}]
---
apiVersion: v1
kind: Pod
metadata: {name: worker, namespace: default}
spec:
  containers: [{name: main, image: cuda, resources: {claims: [{name: mig}]}}]
  resourceClaims: [{name: mig, resourceClaimName: small}]
"""
LAYOUT = """
apiVersion: gpudra.dev/v1alpha1
kind: MigLayout
metadata: {name: big}
spec:
  nodeSelector: {matchLabels: {kubernetes.io/hostname: dgx-a100-0}}
  layout: {config: all-7g.40gb}
"""


def condition(body: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (body.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


async def profiles(cluster: Any, node: str) -> list[str]:
    slices, _ = await admin(cluster).list_raw(RESOURCE_SLICES, field_selector=f"spec.nodeName={node}")
    return sorted(
        d["attributes"]["profile"]["string"]
        for s in slices
        for d in s["spec"].get("devices") or []
        if "profile" in (d.get("attributes") or {})
    )


async def test_a_layout_is_blocked_by_a_prepared_claim_then_applied(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("dgx-a100:1")
    await kubectl(cluster, "apply", "-f", "-", stdin=HOLDER)
    await eventually(lambda: _running(cluster, "worker"), timeout=60)
    await kubectl(cluster, "apply", "-f", "-", stdin=LAYOUT)

    async def blocked() -> dict[str, Any]:
        cond = condition(await admin(cluster).get_raw(MIGLAYOUTS, "big"), "Blocked")
        return cond if cond.get("status") == "True" else {}

    cond = await eventually(blocked, timeout=60)
    assert "default/small" in cond["message"]
    assert "7g.40gb" not in await profiles(cluster, "dgx-a100-0")
    await kubectl(cluster, "delete", "pod", "worker", "--wait=true")

    async def applied() -> bool:
        body = await admin(cluster).get_raw(MIGLAYOUTS, "big")
        return condition(body, "Applied").get("status") == "True"

    await eventually(applied, timeout=60)
    await eventually(lambda: _equal(profiles(cluster, "dgx-a100-0"), ["7g.40gb"] * 8), timeout=30)
    assert "1/1" in await kubectl(cluster, "get", "miglayouts")


async def test_dynamic_mig_instances_follow_the_pod(start_kubernetes: StartKubernetes) -> None:
    cluster = await start_kubernetes("dgx-h100:1", dynamic_mig=True)
    example = str(ROOT / "examples" / "dynamic-mig-1g.yaml")
    await kubectl(cluster, "apply", "-f", example)
    await eventually(lambda: _running(cluster, "small-inference"), timeout=60)
    (claim,) = (await claims(cluster)).values()
    (result,) = results(claim)
    gpu = cluster.simulated["dgx-h100-0"].gpu(int(result["device"].split("-")[1]))
    assert [gi.profile.name for gi in gpu.gpu_instances.values()] == ["1g.10gb"]
    await kubectl(cluster, "delete", "-f", example, "--wait=true")
    assert not gpu.gpu_instances, "the instance is destroyed once the pod is gone"


async def _running(cluster: Any, name: str) -> bool:
    current = await pods(cluster)
    return name in current and phase(current[name]) == "Running"


async def _equal(values: Any, expected: list[str]) -> bool:
    return bool(await values == expected)
