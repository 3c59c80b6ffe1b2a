"""The client the embedded cluster shares between every simulated node's agent and kubelet holds one connection
per open watch; with many nodes those outnumber aiohttp's default cap of 100, and a capped client's next request
would wait for a free connection forever (``gpudra up --nodes gb200-nvl72:64`` hung at start-up that way).
And it talks to its loopback server directly, whatever proxy the environment names."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from clusterkit import StartCluster, eventually
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import NODES


async def _watch_forever(client: KubeClient) -> None:
    async for _ in client.watch(NODES, timeout_seconds=60):
        pass


async def test_the_shared_client_serves_requests_beside_more_watches_than_the_default_cap(
    start_cluster: StartCluster,
) -> None:
    cluster = await start_cluster("l4x4:1")
    client = cluster.client
    assert client is not None
    assert cluster.server is not None
    nodes = cluster.server.database.stores[("", "nodes")]
    before = len(nodes.watchers)  # the cluster's own
    watches = [asyncio.create_task(_watch_forever(client)) for _ in range(110)]
    try:
        await eventually(
            lambda: len(nodes.watchers) >= before + 110, what="the 110 watches open on the server"
        )
        items, _ = await asyncio.wait_for(client.list_raw(NODES), timeout=10)
        assert [n["metadata"]["name"] for n in items] == ["l4x4-0"]
    finally:
        for task in watches:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*watches, return_exceptions=True)


async def test_a_client_of_a_url_ignores_proxies_named_in_the_environment(
    start_cluster: StartCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = await start_cluster("l4x4:1")
    assert cluster.server is not None and cluster.serving_tls is not None
    for variable in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(variable, "http://127.0.0.1:9")  # the discard port: nothing answers there
    for variable in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(variable, raising=False)
    client = KubeClient.for_url(cluster.server.url, token=cluster.server.token(), ca=cluster.serving_tls.ca)
    try:
        items, _ = await asyncio.wait_for(client.list_raw(NODES), timeout=10)
        assert [n["metadata"]["name"] for n in items] == ["l4x4-0"]
    finally:
        await client.close()
