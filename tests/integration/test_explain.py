"""`gpudra explain`: whether a claim would fit and where, and why a pending claim waits, against the embedded
cluster, through the CLI a user runs."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterkit import StartCluster, eventually
from gpudra.cluster.up import EmbeddedCluster
from gpudra.config import ControllerSettings
from gpudra.kube.resources import EVENTS, PODS, RESOURCE_CLAIMS

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
    assert "fits now on node dgx-h100-0: gpu-0" in out
    assert cluster.client is not None
    claims, _ = await cluster.client.list_raw(RESOURCE_CLAIMS)
    assert claims == []


async def test_file_that_cannot_fit_says_why(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    manifest = tmp_path / "nine.yaml"
    manifest.write_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: nine}\nspec:\n  devices:\n"
        "    requests:\n    - name: gpus\n      exactly: {deviceClassName: gpu.nvidia.com, count: 9}\n"
    )
    code, out = await gpudra(cluster, "--file", str(manifest), "-o", "wide")
    assert code == 1, out
    assert (
        "does not fit (InsufficientDevices): needs 9 GPUs on one node; the most on any node is 8 (dgx-h100-0)"
        in out
    )
    assert "l4x4-0 has 4" in out
    nodes = out[out.index("nodes, nearest first") :]
    assert nodes.index("dgx-h100-0") < nodes.index("l4x4-0")


NINE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "nine", "namespace": "default"},
    "spec": {
        "devices": {
            "requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 9}}]
        }
    },
}
NINE_FIRST = "needs 9 GPUs on one node; the most on any node is 8 (dgx-h100-0)"


async def test_the_event_the_scheduler_and_explain_lead_with_the_same_nearest_miss(
    start_cluster: StartCluster,
) -> None:
    settings = ControllerSettings(pending_grace_seconds=0.2, pending_interval_seconds=0.2)
    cluster = await start_cluster("dgx-h100:1,l4x4:1", controller=settings)
    assert cluster.client is not None
    client = cluster.client
    await client.create(RESOURCE_CLAIMS, NINE, "default")
    await client.create(PODS, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer", "namespace": "default"},
        "spec": {"resourceClaims": [{"name": "gpus", "resourceClaimName": "nine"}],
                 "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpus"}]}}]},
    }, "default")  # fmt: skip

    async def events(name: str, component: str) -> list[dict[str, Any]]:
        found, _ = await client.list_raw(EVENTS, "default", field_selector=f"involvedObject.name={name}")
        return [e for e in found if e["source"]["component"] == component]

    explained = await eventually(lambda: events("nine", "gpudra-controller"), timeout=30)
    assert explained[0]["reason"] == "InsufficientDevices"
    assert explained[0]["message"].startswith(NINE_FIRST + ". ")
    scheduled = await eventually(lambda: events("trainer", "gpudra-scheduler"), timeout=30)
    assert scheduled[0]["message"] == explained[0]["message"]
    code, out = await gpudra(cluster, "claim", "nine", "-o", "wide")
    assert code == 1, out
    said = next(line for line in out.splitlines() if line.startswith("does not fit"))
    assert said == f"does not fit ({explained[0]['reason']}): {NINE_FIRST}"
    for sentence in explained[0]["message"].split(". ")[1:]:
        assert f"  {sentence}" in out


async def test_bad_cel_is_reported_with_position(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: bad}\nspec:\n  devices:\n"
        "    requests:\n    - name: gpu\n      exactly:\n        deviceClassName: gpu.nvidia.com\n"
        "        selectors:\n        - cel:\n"
        '            expression: \'device.capacity["gpu.nvidia.com"].memory >= quantity("40Gi")\'\n'
    )
    code, out = await gpudra(cluster, "--file", str(manifest))
    assert code == 1, out
    assert "InvalidSelector" in out and "compareTo" in out


async def test_missing_arguments_are_a_clear_error(cluster: EmbeddedCluster) -> None:
    code, out = await gpudra(cluster)
    assert code == 2
    assert "give either `claim NAME`, `pod NAME` or `--file claim.yaml`" in out


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
    assert "8x NVIDIA H100 80GB HBM3" in h100
    assert "UNHEALTHY" in text and "ALLOCATED" in text


async def status(cluster: EmbeddedCluster, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpudra", "status", "--kubeconfig", str(cluster.options.kubeconfig), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_status_output_formats_as_kubectl_has_them(cluster: EmbeddedCluster) -> None:
    data = json.loads(await status(cluster, "-o", "json"))
    h100 = next(n for n in data["nodes"] if n["node"] == "dgx-h100-0")
    assert h100["gpus"] == {"NVIDIA H100 80GB HBM3": 8} and h100["allocated"] == 0
    assert yaml.safe_load(await status(cluster, "-o", "yaml")) == data
    wide = await status(cluster, "-o", "wide")
    assert "SLICES" in wide and "PROFILE" in wide
    assert all(s in wide for n in data["nodes"] for s in n["slices"])  # no terminal: never cut
    assert "SLICES" not in await status(cluster)
