"""The checks of tests/workloadkit.py on the real control plane (kube-apiserver, kube-controller-manager and
kube-scheduler 1.37.2 over the stand-in kubelets): what the embedded cluster is held to."""

from __future__ import annotations

from pathlib import Path

from _realkit import StartKubernetes

import workloadkit


async def test_a_deployment_rolls_out_and_scales(start_kubernetes: StartKubernetes, tmp_path: Path) -> None:
    cluster = await start_kubernetes("l4x4:1")
    await workloadkit.deployment_rolls_out_through_a_replicaset(cluster, tmp_path)
    await workloadkit.deployment_scales(cluster, tmp_path)


async def test_a_job_and_a_run_pod_complete_and_nodes_have_wide_columns(
    start_kubernetes: StartKubernetes, tmp_path: Path
) -> None:
    cluster = await start_kubernetes("l4x4:1")
    await workloadkit.job_completes(cluster, tmp_path)
    await workloadkit.a_run_pod_whose_command_exits_completes(cluster)
    await workloadkit.nodes_have_wide_columns(cluster)
