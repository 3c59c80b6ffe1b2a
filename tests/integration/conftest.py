"""Fixtures of the integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from _prepare_kit import Node, cleanup, make_node
from kubernetes_asyncio.client import ApiClient, Configuration

from authkit import admin_headers
from clusterkit import StartCluster
from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.cluster.up import EmbeddedCluster
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import NAMESPACES
from passthroughkit import NS as PASSTHROUGH_NS

# --- embedded API server fixtures (owned by the apiserver work; add other fixtures below) -------------------


@pytest.fixture
async def apiserver() -> AsyncIterator[EmbeddedAPIServer]:
    """A started embedded API server on a free port, stopped after the test."""
    server = EmbeddedAPIServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def kube_api(apiserver: EmbeddedAPIServer) -> AsyncIterator[ApiClient]:
    """A kubernetes_asyncio ApiClient talking to the ``apiserver`` fixture."""
    configuration = Configuration(
        host=apiserver.url,
        api_key={"BearerToken": apiserver.token()},
        api_key_prefix={"BearerToken": "Bearer"},
    )
    async with ApiClient(configuration) as client:
        yield client


@pytest.fixture
async def http(apiserver: EmbeddedAPIServer) -> AsyncIterator[aiohttp.ClientSession]:
    """A raw aiohttp session whose relative URLs go to the ``apiserver`` fixture."""
    async with aiohttp.ClientSession(base_url=apiserver.url, headers=admin_headers(apiserver)) as session:
        yield session


# --- end of embedded API server fixtures ------------------------------------------------------------------


# --- a node's prepare machinery (tests/integration/_prepare_kit.py) ---------------------------------------


@pytest.fixture
async def idle_prepare_node(apiserver: EmbeddedAPIServer, tmp_path: Path) -> AsyncIterator[Node]:
    """A node rig built but not started (recovery tests start its preparer themselves)."""
    client = KubeClient.for_url(apiserver.url, token=apiserver.token())
    rig = await make_node(client, tmp_path)
    try:
        yield rig
    finally:
        await rig.stop()
        await client.close()
        cleanup(rig)


@pytest.fixture
async def prepare_node(idle_prepare_node: Node) -> Node:
    """A started node rig (recovered preparer behind real plugin sockets, a registered kubelet client)."""
    await idle_prepare_node.start()
    return idle_prepare_node


@pytest.fixture
async def passthrough_cluster(start_cluster: StartCluster) -> EmbeddedCluster:
    cluster = await start_cluster(
        "l4x4:1", hardware_poll_seconds=0.1, agent_settings={"passthrough_support": True}
    )
    assert cluster.client is not None
    await cluster.client.apply_object(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PASSTHROUGH_NS}}
    )
    return cluster
