"""The embedded API server of ``gpudra up`` authenticates and authorizes as kube-apiserver does: no credentials or
bad ones get 401, kubectl works with the kubeconfig ``gpudra up`` writes, and each component has its own identity,
refused with 403 what manifests/base's RBAC does not grant it (the same kit runs against kube-apiserver in
tests/kubernetes/test_real_auth.py)."""

from __future__ import annotations

import ssl

from authkit import AGENT, check_least_privilege, check_refused_without_credentials, forbidden, refused
from clusterkit import StartCluster, kubectl
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import NODES

A, B = "l4x4-0", "l4x4-1"


async def test_requests_without_valid_credentials_arerefused_as_kube_apiserver_refuses_them(
    start_cluster: StartCluster,
) -> None:
    cluster = await start_cluster("l4x4:1")
    assert cluster.serving_tls is not None
    await check_refused_without_credentials(
        cluster.url, ssl.create_default_context(cafile=cluster.serving_tls.ca)
    )


async def test_kubectl_works_with_the_kubeconfig_gpudra_up_writes(start_cluster: StartCluster) -> None:
    cluster = await start_cluster("l4x4:1")
    assert (await kubectl(cluster, "get", "nodes", "-o", "name")).strip() == f"node/{A}"
    await kubectl(cluster, "create", "namespace", "mine")
    assert "namespace/mine" in await kubectl(cluster, "get", "namespaces", "-o", "name")


async def test_the_agents_and_the_controller_arerefused_what_their_rbac_does_not_grant(
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
