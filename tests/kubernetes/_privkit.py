"""What the least-privilege tests of the real-control-plane tier share: a component's own credentials, and a write
that must be refused with its status and reason."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import pytest

from gpudra.cluster.up import EmbeddedCluster
from gpudra.errors import KubeError
from gpudra.kube.client import KubeClient

DRIVER_NS = "gpudra"


async def refused(write: Awaitable[Any], status: int, *reason: str) -> None:
    with pytest.raises(KubeError) as caught:
        await write
    assert caught.value.status == status, str(caught.value)
    for part in reason:
        assert part in str(caught.value), str(caught.value)


def forbidden_in(namespace: str, verb: str, resource: str) -> tuple[str, ...]:
    return (f'cannot {verb} resource "{resource}"', f'in the namespace "{namespace}"')


async def own_client(cluster: EmbeddedCluster, kubeconfig: Any, name: str) -> KubeClient:
    client = await KubeClient.from_environment(kubeconfig, field_manager=name)
    cluster._clients.append(client)  # closed with the cluster
    return client


async def controller_client(cluster: EmbeddedCluster) -> KubeClient:
    assert cluster.kubernetes is not None
    return await own_client(cluster, cluster.kubernetes.layout.kubeconfig("gpudra-controller"), "controller")
