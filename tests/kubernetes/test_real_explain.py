"""`gpudra explain pod` on the real control plane: the pod's claim made by kube-controller-manager from a template
is found through the pod's status and explained as on the embedded cluster (tests/integration/
test_explain_pod.py), in 80 columns, with exit status 1 while it cannot fit."""

from __future__ import annotations

import asyncio
import sys

from _realkit import StartKubernetes, pods

from clusterkit import eventually, kubectl

NINE = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: gpus-9, namespace: default}
spec:
  spec:
    devices:
      requests: [{name: gpus, exactly: {deviceClassName: gpu.nvidia.com, count: 9}}]
---
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: default}
spec:
  containers: [{name: main, image: cuda, resources: {claims: [{name: gpus}]}}]
  resourceClaims: [{name: gpus, resourceClaimTemplateName: gpus-9}]
"""


async def test_explain_pod_finds_the_claim_kube_controller_manager_made(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("dgx-h100:1")
    await kubectl(cluster, "apply", "-f", "-", stdin=NINE)

    async def made() -> str:
        statuses = ((await pods(cluster))["trainer"].get("status") or {}).get("resourceClaimStatuses") or []
        return str(statuses[0].get("resourceClaimName") or "") if statuses else ""

    claim = await eventually(made, timeout=30)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpudra", "explain", "pod", "trainer", "--kubeconfig", str(cluster.options.kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    text = out.decode()
    assert proc.returncode == 1, text
    lines = text.splitlines()
    assert lines[0] == f"claim default/{claim} does not fit (InsufficientDevices)", text
    assert "the most on any node is 8 (dgx-h100-0)" in " ".join(line.strip() for line in lines[1:3]), text
    assert max(len(line) for line in lines) <= 80, text
