"""kube-apiserver answers the authentication and authorization checks of tests/authkit.py as the embedded API
server does (tests/integration/test_apiserver_auth.py): 401 without valid credentials (``--anonymous-auth=false``,
as ``gpudra up --control-plane kubernetes`` runs it), and 403 with the same message for what manifests/base's
RBAC does not grant the agent and the controller."""

from __future__ import annotations

import ssl

from _privkit import controller_client
from _realkit import StartKubernetes

from authkit import check_least_privilege, check_refused_without_credentials

A, B = "l4x4-0", "l4x4-1"


async def test_kube_apiserver_refuses_what_the_embedded_server_refuses(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("l4x4:2")
    assert cluster.kubernetes is not None
    await check_refused_without_credentials(
        cluster.url, ssl.create_default_context(cafile=cluster.kubernetes.ca)
    )
    await check_least_privilege(cluster.agent_clients[A], await controller_client(cluster), B)
