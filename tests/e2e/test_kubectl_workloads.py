"""Workloads under kubectl on the embedded cluster, as on a real one (tests/workloadkit.py; the same checks run
on the real control plane in tests/kubernetes/test_real_kubectl_workloads.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import workloadkit
from clusterkit import StartCluster, eventually, kubectl

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH"),
]


async def test_a_deployment_rolls_out_through_a_replicaset(
    start_cluster: StartCluster, tmp_path: Path
) -> None:
    await workloadkit.deployment_rolls_out_through_a_replicaset(await start_cluster("l4x4:1"), tmp_path)


async def test_kubectl_scale_scales_a_deployment(start_cluster: StartCluster, tmp_path: Path) -> None:
    await workloadkit.deployment_scales(await start_cluster("l4x4:1"), tmp_path)


async def test_a_job_whose_command_exits_completes(start_cluster: StartCluster, tmp_path: Path) -> None:
    await workloadkit.job_completes(await start_cluster("l4x4:1"), tmp_path)


async def test_kubectl_run_echo_completes_with_the_events_of_a_kubelet(start_cluster: StartCluster) -> None:
    await workloadkit.a_run_pod_whose_command_exits_completes(await start_cluster("l4x4:1"))


async def test_nodes_have_the_wide_columns(start_cluster: StartCluster) -> None:
    await workloadkit.nodes_have_wide_columns(await start_cluster("l4x4:1,dgx-h100:1"))


INDEXED_JOB = """
apiVersion: batch/v1
kind: Job
metadata: {name: indexed, namespace: default}
spec:
  completionMode: Indexed
  completions: 1
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: worker, image: busybox, command: [sleep, infinity]}
"""


async def test_what_the_stand_in_controllers_leave_out_is_said_on_the_object(
    start_cluster: StartCluster, tmp_path: Path
) -> None:
    """Embedded only: the real job controller runs Indexed Jobs."""
    cluster = await start_cluster("l4x4:1")
    manifest = tmp_path / "indexed.yaml"
    manifest.write_text(INDEXED_JOB)
    await kubectl(cluster, "apply", "-f", str(manifest))

    async def told() -> str:
        text = await kubectl(cluster, "describe", "job", "indexed")
        return text if "NotModelled" in text else ""

    text = await eventually(told, timeout=60, what="a NotModelled Warning on the Job")
    assert "ignores spec.completionMode=Indexed" in text
