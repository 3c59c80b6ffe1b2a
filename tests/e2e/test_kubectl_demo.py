"""The README's kubectl walk-through against the embedded cluster, with the real kubectl (skipped without it)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from clusterkit import StartCluster, kubectl
from gpudra.cluster.up import EmbeddedCluster

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH"),
]


@pytest.fixture
async def demo(start_cluster: StartCluster) -> EmbeddedCluster:
    return await start_cluster("dgx-h100:1,dgx-a100:1")


async def test_get_nodes_deviceclasses_and_resourceslices(demo: EmbeddedCluster) -> None:
    nodes = await kubectl(demo, "get", "nodes")
    assert "dgx-h100-0" in nodes and "Ready" in nodes
    classes = await kubectl(demo, "get", "deviceclasses")
    assert "gpu.nvidia.com" in classes and "mig.nvidia.com" in classes
    slices = await kubectl(demo, "get", "resourceslices")
    assert "dgx-h100-0" in slices and "gpu.nvidia.com" in slices


async def test_resourceslice_yaml_shows_nvidia_attributes(demo: EmbeddedCluster) -> None:
    listing = json.loads(await kubectl(demo, "get", "resourceslices", "-o", "json"))
    h100 = next(s for s in listing["items"] if s["spec"]["nodeName"] == "dgx-h100-0")
    one = await kubectl(demo, "get", "resourceslice", h100["metadata"]["name"], "-o", "yaml")
    assert "productName:" in one and "NVIDIA H100 80GB HBM3" in one
    assert "cudaComputeCapability:" in one and "memory:" in one


async def test_apply_and_delete_a_claim(demo: EmbeddedCluster) -> None:
    example = str(ROOT / "examples" / "claim-h100.yaml")
    assert "created" in await kubectl(demo, "apply", "-f", example)
    assert "h100-80g" in await kubectl(demo, "get", "resourceclaims")
    # "configured", as against kube-apiserver: the live claim carries the defaults (count: 1), so kubectl's merge
    # patch of the atomic requests list is not empty, and applying it changes nothing
    assert "configured" in await kubectl(demo, "apply", "-f", example)
    assert "deleted" in await kubectl(demo, "delete", "-f", example)
    assert "No resources found" in await kubectl(demo, "get", "resourceclaims")


async def test_create_a_namespace_run_two_gpu_pods_and_read_their_logs(demo: EmbeddedCluster) -> None:
    """The README's walk-through: kubectl create namespace, the two nvidia-smi pods READY 1/1, their logs name two
    different H100s."""
    example = str(ROOT / "examples" / "nvidia-smi-pods.yaml")
    assert "namespace/demo created" in await kubectl(demo, "create", "namespace", "demo")
    await kubectl(demo, "apply", "-f", example)
    await kubectl(demo, "wait", "--for=condition=Ready", "pods", "--all", "-n", "demo", "--timeout=60s")
    rows = [line.split() for line in (await kubectl(demo, "get", "pods", "-n", "demo")).splitlines()[1:]]
    assert [row[:3] for row in rows] == [["smi-1", "1/1", "Running"], ["smi-2", "1/1", "Running"]]
    assert (await kubectl(demo, "get", "resourceclaims", "-n", "demo")).count("allocated,reserved") == 2
    logs = await kubectl(demo, "logs", "-n", "demo", "-l", "app=smi")
    gpus = [line for line in logs.splitlines() if line.startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")]
    assert len(gpus) == 2 and gpus[0] != gpus[1]
    assert "deleted" in await kubectl(demo, "delete", "-f", example)


@pytest.mark.slow
async def test_gpudra_up_once_prints_the_fleet_and_exits_zero(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpudra", "up", "--once", "--nodes", "dgx-a100:1,l4x4:1",
        "--kubeconfig", str(kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    text = out.decode()
    assert proc.returncode == 0, err.decode()[-2000:]
    assert f"export KUBECONFIG={kubeconfig.resolve()}" in text
    assert "dgx-a100-0" in text and "l4x4-0" in text
    assert "1g.5gb" in text
    assert kubeconfig.exists()
    # stopped right after it was up: kopf had finished finding the API's resources, so none of its requests
    # were left retrying against closed connections
    retried = [line for line in (text + err.decode()).splitlines() if "Request attempt" in line]
    assert not retried, retried


async def test_kubectl_apply_of_a_seed_pattern_gets_allocated_and_bound(demo: EmbeddedCluster) -> None:
    seed = str(ROOT / "examples" / "seeds" / "02-shared-claim-two-pods.yaml")
    await kubectl(demo, "apply", "-f", seed)
    for _ in range(100):
        claims = await kubectl(demo, "get", "resourceclaims")
        if "allocated,reserved" in claims:
            break
        await asyncio.sleep(0.1)
    assert "shared-inference-gpu" in claims and "allocated,reserved" in claims
    pods = json.loads(await kubectl(demo, "get", "pods", "-o", "json"))
    assert {p["spec"].get("nodeName") for p in pods["items"]} == {"dgx-h100-0"}
    await kubectl(demo, "delete", "-f", seed)


async def test_apply_a_miglayout_and_watch_it_apply(demo: EmbeddedCluster) -> None:
    example = str(ROOT / "examples" / "miglayout-balanced.yaml")
    assert "created" in await kubectl(demo, "apply", "-f", example)
    deadline = asyncio.get_running_loop().time() + 30
    table = ""
    while asyncio.get_running_loop().time() < deadline:
        table = await kubectl(demo, "get", "miglayouts")
        if "1/1" in table:
            break
        await asyncio.sleep(0.2)
    header, row = table.splitlines()[:2]
    assert header.split() == ["NAME", "POLICY", "CONFIG", "NODES", "APPLIED", "BLOCKED", "INVALID", "AGE"]
    assert row.split()[:7] == ["balanced", "Static", "all-balanced", "1", "1/1", "0", "False"]
    assert "balanced" in await kubectl(demo, "get", "mlay")
