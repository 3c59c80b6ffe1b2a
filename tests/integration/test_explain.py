"""`gpudra explain`: whether a claim would fit and where, and why a pending claim waits, against the embedded
cluster, through the CLI a user runs."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from clusterkit import StartCluster
from gpudra.cluster.up import EmbeddedCluster
from gpudra.kube.resources import RESOURCE_CLAIMS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def cluster(start_cluster: StartCluster) -> EmbeddedCluster:
    return await start_cluster("dgx-h100:1,l4x4:1")


async def gpudra(cluster: EmbeddedCluster, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpudra", "explain", *args, "--kubeconfig", str(cluster.options.kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={**os.environ, "COLUMNS": "250"},
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    return proc.returncode or 0, out.decode()


async def test_file_that_fits_names_the_node_and_device_without_creating_it(
    cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    code, out = await gpudra(cluster, "--file", str(ROOT / "examples" / "claim-h100.yaml"))
    assert code == 0, out
    assert "fits: node dgx-h100-0" in out and "gpu-0" in out
    assert cluster.client is not None
    claims, _ = await cluster.client.list(RESOURCE_CLAIMS)
    assert claims == []


async def test_file_that_cannot_fit_says_why(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    manifest = tmp_path / "nine.yaml"
    manifest.write_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: nine}\nspec:\n  devices:\n"
        "    requests:\n    - name: gpus\n      exactly: {deviceClassName: gpu.nvidia.com, count: 9}\n"
    )
    code, out = await gpudra(cluster, "--file", str(manifest))
    assert code == 0, out
    assert "does not fit" in out and "InsufficientDevices" in out


async def test_bad_cel_is_reported_with_position(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: bad}\nspec:\n  devices:\n"
        "    requests:\n    - name: gpu\n      exactly:\n        deviceClassName: gpu.nvidia.com\n"
        "        selectors:\n        - cel:\n"
        '            expression: \'device.capacity["gpu.nvidia.com"].memory >= quantity("40Gi")\'\n'
    )
    code, out = await gpudra(cluster, "--file", str(manifest))
    assert code == 0, out
    assert "InvalidSelector" in out and "compareTo" in out


async def test_missing_arguments_are_a_clear_error(cluster: EmbeddedCluster) -> None:
    code, out = await gpudra(cluster)
    assert code == 2
    assert "give either `claim NAME` or `--file claim.yaml`" in out


async def test_status_shows_the_fleet_with_allocated_devices(
    cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpudra", "status", "--kubeconfig", str(cluster.options.kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={**os.environ, "COLUMNS": "250"},
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    text = out.decode()
    assert proc.returncode == 0, text
    h100 = next(line for line in text.splitlines() if "dgx-h100-0" in line)
    assert "NVIDIA H100 80GB HBM3" in h100 and " 8 " in h100
    assert "UNHEALTHY" in text and "ALLOCATED" in text
