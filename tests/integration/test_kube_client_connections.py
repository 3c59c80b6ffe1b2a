"""The client the embedded cluster shares between every simulated node's agent and kubelet holds one connection
per open watch; with many nodes those outnumber aiohttp's default cap of 100, and a capped client's next request
would wait for a free connection forever (``gpudra up --nodes gb200-nvl72:64`` hung at start-up that way)."""

from __future__ import annotations

import asyncio
import contextlib

from clusterkit import StartCluster
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
    watches = [asyncio.create_task(_watch_forever(client)) for _ in range(110)]
    try:
        await asyncio.sleep(0.5)  # let them connect
        items, _ = await asyncio.wait_for(client.list(NODES), timeout=10)
        assert [n["metadata"]["name"] for n in items] == ["l4x4-0"]
    finally:
        for task in watches:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*watches, return_exceptions=True)
