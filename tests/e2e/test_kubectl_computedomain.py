"""docs/computedomain.md's walk-through with the real kubectl: NVIDIA-style ComputeDomain and Job manifests apply
unchanged, `kubectl get computedomains` shows Ready with its reason, and `kubectl delete` finishes (finalizer)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from clusterkit import StartCluster, kubectl

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "computedomain"
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH"),
]


async def test_apply_the_examples_watch_the_domain_get_ready_and_delete_it(
    start_cluster: StartCluster,
) -> None:
    cluster = await start_cluster("gb200-nvl72:4")
    applied = await kubectl(cluster, "apply", "-f", str(EXAMPLES))
    assert (
        "computedomain.resource.nvidia.com/train created" in applied and "job.batch/train created" in applied
    )

    deadline = time.monotonic() + 60
    table = ""
    while "AllNodesReady" not in table and time.monotonic() < deadline:
        table = await kubectl(cluster, "get", "computedomains")
    assert "STATUS" in table and "REASON" in table
    assert "train" in table and "Ready" in table and "AllNodesReady" in table

    described = await kubectl(cluster, "describe", "computedomain", "train")
    assert "DomainReady" in described and "all 4 nodes ready" in described
    assert "deleted" in await kubectl(cluster, "delete", "-f", str(EXAMPLES / "computedomain.yaml"), "--wait")
    assert "No resources found" in await kubectl(cluster, "get", "computedomains")
