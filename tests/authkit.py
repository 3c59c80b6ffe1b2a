"""Authentication and authorization, as the embedded API server and kube-apiserver 1.37.2 answer them: the
recorded answers, a component's credentials, and the headers of the embedded server's admin."""

from __future__ import annotations

import ssl
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.cluster.apiserver.identity import ADMIN, TokenIssuer
from gpudra.cluster.apiserver.servingtls import new_serving_tls
from gpudra.errors import KubeError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import (
    COMPUTE_DOMAINS,
    CONFIGMAPS,
    DAEMONSETS,
    NODES,
    PODS,
    RESOURCE_CLAIMS,
    Resource,
)

DRIVER_NS = "gpudra"
SECRETS = Resource("", "v1", "secrets", "Secret", namespaced=True)
WIDGETS = Resource("example.com", "v1", "widgets", "Widget", namespaced=True)

UNAUTHORIZED: dict[str, Any] = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "Unauthorized",
    "reason": "Unauthorized",
    "code": 401,
}
"""kube-apiserver 1.37.2's answer with ``--anonymous-auth=false`` to a request without credentials or with a
token it does not know, on every path (the health endpoints and /version included), recorded 2026-11-29 with
both a GET and a POST."""

ANONYMOUS_PATHS = ("/api/v1/namespaces", "/apis", "/version", "/healthz", "/livez", "/readyz", "/openapi/v3")


def admin_headers(server: EmbeddedAPIServer) -> dict[str, str]:
    """The embedded server's admin's bearer token, as its kubeconfig carries it."""
    return {"Authorization": f"Bearer {server.token()}"}


def served_over_https(directory: Path, **options: Any) -> EmbeddedAPIServer:
    """An embedded server on HTTPS with a CA in ``directory``, as ``gpudra up`` serves it: kubectl sends its
    kubeconfig's token over TLS only."""
    return EmbeddedAPIServer(tls=new_serving_tls(directory), **options)


def admin_session(server: EmbeddedAPIServer) -> aiohttp.ClientSession:
    """An aiohttp session of the server's admin, trusting its CA when it serves HTTPS."""
    tls = ssl.create_default_context(cafile=server.tls.ca) if server.tls is not None else True
    return aiohttp.ClientSession(
        base_url=server.url, headers=admin_headers(server), connector=aiohttp.TCPConnector(ssl=tls)
    )


async def check_refused_without_credentials(url: str, tls: ssl.SSLContext | bool) -> None:
    """No credentials, an unknown token, a token signed with another key: 401 with kube-apiserver's Status, on
    every path, for reads and writes alike."""
    forged = TokenIssuer().issue(ADMIN)  # a token of the right shape, signed by a key this server never saw
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls), trust_env=False) as http:
        for path in ANONYMOUS_PATHS:
            for headers in (
                {},
                {"Authorization": "Bearer not-a-token"},
                {"Authorization": f"Bearer {forged}"},
            ):
                async with http.get(url + path, headers=headers) as rsp:
                    assert (rsp.status, await rsp.json()) == (401, UNAUTHORIZED), (path, headers)
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "anonymous"}}
        async with http.post(url + "/api/v1/namespaces", json=namespace) as rsp:
            assert (rsp.status, await rsp.json()) == (401, UNAUTHORIZED)


AGENT = f"system:serviceaccount:{DRIVER_NS}:gpudra-agent"
CONTROLLER = f"system:serviceaccount:{DRIVER_NS}:gpudra-controller"


def forbidden(user: str, verb: str, resource: str, group: str, namespace: str, name: str = "") -> str:
    """kube-apiserver's message for a request RBAC does not allow."""
    qualified = f"{resource}.{group}" if group else resource
    what = f'{qualified} "{name}"' if name else qualified
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    return f'{what} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API group "{group}" {scope}'


async def refused(write: Awaitable[Any], message: str) -> None:
    with pytest.raises(KubeError) as caught:
        await write
    assert (caught.value.status, caught.value.reason) == (403, "Forbidden"), str(caught.value)
    assert message in str(caught.value), str(caught.value)


A_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}


async def check_least_privilege(agent: KubeClient, controller: KubeClient, other_node: str) -> None:
    """What manifests/base's RBAC refuses the agent's and the controller's ServiceAccounts, with kube-apiserver's
    403 and message (RBAC decides before the object is looked up: these objects need not exist); and what it
    allows them still works."""
    await refused(
        agent.delete(COMPUTE_DOMAINS, "victim", "default"),
        forbidden(AGENT, "delete", "computedomains", "resource.nvidia.com", "default", "victim"),
    )
    await refused(agent.delete(NODES, other_node), forbidden(AGENT, "delete", "nodes", "", "", other_node))
    await refused(agent.list_raw(SECRETS, DRIVER_NS), forbidden(AGENT, "list", "secrets", "", DRIVER_NS))
    await refused(agent.create(PODS, A_POD, "default"), forbidden(AGENT, "create", "pods", "", "default"))
    await refused(
        agent.delete(CONFIGMAPS, "imex-channels.other", DRIVER_NS),
        forbidden(AGENT, "delete", "configmaps", "", DRIVER_NS, "imex-channels.other"),
    )
    await refused(
        controller.delete(RESOURCE_CLAIMS, "someones-claim", "default"),
        forbidden(CONTROLLER, "delete", "resourceclaims", "resource.k8s.io", "default", "someones-claim"),
    )
    await refused(
        controller.list_raw(DAEMONSETS, "default"),
        forbidden(CONTROLLER, "list", "daemonsets", "apps", "default"),
    )
    await refused(
        controller.delete(NODES, other_node), forbidden(CONTROLLER, "delete", "nodes", "", "", other_node)
    )
    await refused(  # authorized before it is looked up: a resource nobody serves is 403 too, not 404
        agent.list_raw(WIDGETS, "default"), forbidden(AGENT, "list", "widgets", "example.com", "default")
    )
    nodes, _ = await agent.list_raw(NODES)
    assert other_node in {n["metadata"]["name"] for n in nodes}
    await controller.list_raw(DAEMONSETS, DRIVER_NS)
