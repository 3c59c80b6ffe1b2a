"""A factory for running embedded clusters in tests (the `start_cluster` fixture, registered by tests/conftest.py)."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gpudra.agent.checkpoint import ClaimEntry, decode_checkpoint
from gpudra.agent.runtime import CHECKPOINT_FILE
from gpudra.cluster.fleet import FleetNode, parse_fleet
from gpudra.cluster.up import EmbeddedCluster, UpOptions
from gpudra.kube.client import KubeClient
from gpudra.testing import eventually as eventually  # the kit's, re-exported for the tests

StartCluster = Callable[..., Awaitable[EmbeddedCluster]]


@pytest.fixture
async def start_cluster(tmp_path: Path) -> AsyncIterator[StartCluster]:
    """``await start_cluster("dgx-h100:1,l4x4:1", **UpOptions fields)``: a running embedded cluster (as `gpudra up`
    runs it, kubeconfig in the test's tmp dir), stopped after the test. The fleet may also be a list of nodes
    (a fleet file's)."""
    started: list[EmbeddedCluster] = []

    async def start(fleet: str | list[FleetNode], **options: Any) -> EmbeddedCluster:
        if isinstance(fleet, str):
            fleet = parse_fleet(fleet, {part.split(":")[0].strip() for part in fleet.split(",")})
        options.setdefault("kubeconfig", tmp_path / f"cluster-{len(started)}" / "kubeconfig")
        cluster = EmbeddedCluster(UpOptions(nodes=fleet, **options))
        started.append(cluster)
        await cluster.start()
        return cluster

    try:
        yield start
    finally:
        for cluster in started:
            await cluster.stop()


def client_of(cluster: EmbeddedCluster) -> KubeClient:
    """The started cluster's API client."""
    assert cluster.client is not None
    return cluster.client


async def kubectl(
    cluster: EmbeddedCluster, *args: str, check: bool = True, stdin: str | None = None, timeout: float = 60
) -> str:
    """The real kubectl against the cluster's kubeconfig; stdout and stderr together (``timeout``: seconds the
    process may take, more than any ``--timeout`` given to kubectl), less the lines of kubectl's own log when it
    succeeded (``kubectl exec`` may log a websocket stream's hiccup beside the command's output)."""
    env = {**os.environ, "KUBECONFIG": str(cluster.options.kubeconfig)}
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        *args,
        env=env,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin else None), timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {err.decode()}")
    said = err.decode()
    if proc.returncode == 0:
        said = "".join(line for line in said.splitlines(keepends=True) if not KLOG_LINE.match(line))
    return out.decode() + said


KLOG_LINE = re.compile(r"[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d{6}\s+\d+ [\w./-]+:\d+\] ")
"""A line of kubectl's own log (klog's header: severity, date, time, thread, file:line)."""


def gpu_claim(name: str, count: int, namespace: str = "default") -> dict[str, Any]:
    """A ResourceClaim for ``count`` whole GPUs of the gpu.nvidia.com class."""
    request = {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [request]}},
    }


def mig_claim(name: str, profile: str, count: int = 1) -> dict[str, Any]:
    """A ResourceClaim for ``count`` MIG devices of one profile (``1g.10gb``)."""
    expression = f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "mig", "exactly": {
            "deviceClassName": "mig.nvidia.com", "count": count,
            "selectors": [{"cel": {"expression": expression}}]}}]}},
    }  # fmt: skip


def mig_layout(name: str, node: str, config: str = "all-balanced") -> dict[str, Any]:
    """A MigLayout giving one node's GPUs a named mig-parted config."""
    return {
        "apiVersion": "gpudra.dev/v1alpha1",
        "kind": "MigLayout",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": {"kubernetes.io/hostname": node}},
            "layout": {"config": config},
        },
    }


def described_fields(schema: dict[str, Any], path: str = "") -> list[tuple[str, str]]:
    """(dotted path, description) of every field under an OpenAPI ``schema`` (list items are walked through, as
    ``kubectl explain`` does)."""
    out = []
    for name, sub in (schema.get("properties") or {}).items():
        here = f"{path}.{name}" if path else name
        if "description" in sub:
            out.append((here, sub["description"]))
        out += described_fields(sub.get("items", sub), here)
    return out


def first_words(text: str) -> str:
    """A description's first words, as kubectl wraps them onto its first line."""
    return " ".join(text.split()[:4])


def checkpoint_claims(cluster: EmbeddedCluster, node: str) -> dict[str, ClaimEntry]:
    """The node's agent's prepared-claims checkpoint, by claim uid."""
    path = cluster.node_dirs[node] / "state" / CHECKPOINT_FILE
    if not path.exists():
        return {}
    claims_, _ = decode_checkpoint(path.read_bytes(), node=node, driver="gpu.nvidia.com")
    return claims_


def claim_specs(cluster: EmbeddedCluster, node: str) -> list[Path]:
    """The node's per-claim CDI spec files."""
    return sorted((cluster.node_dirs[node] / "cdi").glob("*claim_*.json"))
