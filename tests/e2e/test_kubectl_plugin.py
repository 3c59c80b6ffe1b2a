"""kubectl as users expect it: `kubectl gpudra explain pod|claim NAME` and `kubectl gpudra status` through kubectl's
plugin mechanism (the kubectl-gpudra entry point on PATH), with the real kubectl against the embedded cluster
(tests/kubernetes/test_real_kubectl.py: `kubectl explain` of the CRDs and the plugin on the real kube-apiserver)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from clusterkit import StartCluster
from gpudra.cluster.up import EmbeddedCluster

BIN = Path(
    sys.executable
).parent  # where the project's entry points are installed (kubectl-gpudra among them)
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH"),
]
NINE_GPUS = """apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: nine, namespace: default}
spec:
  devices:
    requests:
    - {name: gpus, exactly: {deviceClassName: gpu.nvidia.com, count: 9}}
"""
TRAINER = """apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: default}
spec:
  containers: [{name: main, image: cuda, resources: {claims: [{name: gpus}]}}]
  resourceClaims: [{name: gpus, resourceClaimName: nine}]
"""


@pytest.fixture
async def cluster(start_cluster: StartCluster) -> EmbeddedCluster:
    return await start_cluster("dgx-h100:1,dgx-a100:1")


async def kubectl(cluster: EmbeddedCluster, *args: str, code: int = 0) -> str:
    env = {**os.environ, "KUBECONFIG": str(cluster.options.kubeconfig), "PATH": f"{BIN}:{os.environ['PATH']}"}
    proc = await asyncio.create_subprocess_exec(
        "kubectl", *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == code, f"kubectl {' '.join(args)} exited {proc.returncode}: {err.decode()}"
    return out.decode() + err.decode()


async def test_kubectl_finds_the_plugin_and_runs_status(cluster: EmbeddedCluster) -> None:
    assert "kubectl-gpudra" in await kubectl(cluster, "plugin", "list")
    table = await kubectl(cluster, "gpudra", "status")
    assert "dgx-a100-0" in table and "8x NVIDIA H100 80GB HBM3" in table
    data = json.loads(await kubectl(cluster, "gpudra", "status", "-o", "json"))
    assert {n["node"] for n in data["nodes"]} == {"dgx-a100-0", "dgx-h100-0"}
    assert "kubectl gpudra explain pod NAME | claim NAME" in await kubectl(cluster, "gpudra")
    assert "unknown command 'up'" in await kubectl(cluster, "gpudra", "up", code=2)


async def test_kubectl_gpudra_explains_a_pending_claim(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    manifest = tmp_path / "nine.yaml"
    manifest.write_text(NINE_GPUS)
    await kubectl(cluster, "apply", "-f", str(manifest))
    said = await kubectl(cluster, "gpudra", "explain", "claim", "nine", "-n", "default", code=1)
    assert "does not fit" in said and "dgx-h100-0" in said and "9" in said
    pod = tmp_path / "pod.yaml"
    pod.write_text(TRAINER)
    await kubectl(cluster, "apply", "-f", str(pod))
    assert await kubectl(cluster, "gpudra", "explain", "pod", "trainer", code=1) == said
    missing = await kubectl(cluster, "gpudra", "explain", "claim", "absent", code=2)
    assert missing.startswith("kubectl gpudra explain: ") and "absent" in missing
