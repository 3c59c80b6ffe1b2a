"""The embedded API server of ``gpudra up`` authenticates and authorizes as kube-apiserver does: no credentials or
bad ones get 401, kubectl works with the kubeconfig ``gpudra up`` writes, and each component has its own identity,
refused with 403 what manifests/base's RBAC does not grant it (the same kit runs against kube-apiserver in
tests/kubernetes/test_real_auth.py)."""

from __future__ import annotations

import asyncio
import os
import ssl
from asyncio.subprocess import PIPE
from pathlib import Path

import yaml

from authkit import AGENT, check_least_privilege, check_refused_without_credentials, forbidden, refused
from clusterkit import StartCluster, kubectl
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import NODES

A, B = "l4x4-0", "l4x4-1"


async def test_requests_without_valid_credentials_are_refused_as_kube_apiserver_refuses_them(
    start_cluster: StartCluster,
) -> None:
    cluster = await start_cluster("l4x4:1")
    assert cluster.serving_tls is not None
    await check_refused_without_credentials(
        cluster.url, ssl.create_default_context(cafile=cluster.serving_tls.ca)
    )


async def test_kubectl_works_with_the_kubeconfig_gpudra_up_writes_and_only_with_its_token(
    start_cluster: StartCluster, tmp_path: Path
) -> None:
    cluster = await start_cluster("l4x4:1")
    assert (await kubectl(cluster, "get", "nodes", "-o", "name")).strip() == f"node/{A}"
    await kubectl(cluster, "create", "namespace", "mine")
    assert "namespace/mine" in await kubectl(cluster, "get", "namespaces", "-o", "name")
    config = yaml.safe_load(cluster.options.kubeconfig.read_text())
    config["users"][0]["user"] = {"token": "not-a-token"}  # the same server and CA, another token
    forged = tmp_path / "forged-kubeconfig"
    forged.write_text(yaml.safe_dump(config))
    kubectl_env = {**os.environ, "KUBECONFIG": str(forged)}
    done = await asyncio.create_subprocess_exec(
        "kubectl", "get", "nodes", env=kubectl_env, stdout=PIPE, stderr=PIPE
    )
    _, err = await asyncio.wait_for(done.communicate(), timeout=60)
    assert done.returncode == 1
    assert "error: You must be logged in to the server (Unauthorized)" in err.decode()


async def test_the_agents_and_the_controller_are_refused_what_their_rbac_does_not_grant(
    start_cluster: StartCluster,
) -> None:
    cluster = await start_cluster("l4x4:2")
    controller = await KubeClient.from_environment(cluster.controller_kubeconfig, field_manager="test")
    try:
        # the agents' clients are in-process: they carry the agent's identity without a token
        await check_least_privilege(cluster.agent_clients[A], controller, B)
    finally:
        await controller.close()


async def test_an_agent_process_connects_with_the_agent_service_accounts_token(
    start_cluster: StartCluster,
) -> None:
    cluster = await start_cluster("l4x4:1", agent_processes=True)
    agent = await KubeClient.from_environment(cluster.node_dirs[A] / "agent.kubeconfig", field_manager="test")
    try:
        await refused(agent.delete(NODES, A), forbidden(AGENT, "delete", "nodes", "", "", A))
    finally:
        await agent.close()
