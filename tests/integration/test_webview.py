"""The controller's web view against the embedded cluster, over HTTP: the page as it is, then live updates over
server-sent events as claims, layouts and slices change (the browser tests drive the same through chromium)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from clusterkit import StartCluster, gpu_claim, mig_layout
from gpudra.cluster.up import EmbeddedCluster
from gpudra.controller.miglayouts import MIGLAYOUTS
from gpudra.kube.resources import RESOURCE_CLAIMS

NINE_GPUS = gpu_claim("nine", 9)
BALANCED = mig_layout("balanced", "dgx-h100-0")


@pytest.fixture
async def cluster(start_cluster: StartCluster) -> EmbeddedCluster:
    return await start_cluster("dgx-h100:1,l4x4:1", web_port=0)


class Stream:
    """The page's view of the fragments, kept by applying the server's updates as the page's script does."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.fragments: dict[str, dict[str, str]] = {}
        self.version = 0

    async def _updates(self) -> AsyncIterator[dict[str, Any]]:
        async for line in self._response.content:
            if line.startswith(b"data: "):
                yield json.loads(line[6:])

    async def until(self, section: str, test: str | Callable[[str], bool], timeout: float = 30.0) -> str:
        """Apply updates until a fragment of ``section`` passes ``test`` (a regular expression or a predicate);
        return that fragment."""
        passes = test if callable(test) else lambda html: re.search(test, html) is not None

        async def wait() -> str:
            async for update in self._updates():
                self.version = update["version"]
                for name, change in update["sections"].items():
                    box = self.fragments.setdefault(name, {})
                    box.update(change["set"])
                    if change["order"] is not None:
                        self.fragments[name] = {k: box[k] for k in change["order"]}
                for html in self.fragments.get(section, {}).values():
                    if passes(html):
                        return html
            raise AssertionError("the stream ended")

        return await asyncio.wait_for(wait(), timeout)


async def test_page_then_live_updates_of_pending_claims_and_mig_layouts(cluster: EmbeddedCluster) -> None:
    assert cluster.web_url and cluster.client is not None
    async with aiohttp.ClientSession() as session:
        async with session.get(cluster.web_url) as response:
            page = await response.text()
            assert response.status == 200
        assert 'data-frag="node/dgx-h100-0"' in page and 'data-frag="node/l4x4-0"' in page
        version = re.search(r'data-version="(\d+)"', page)
        assert version is not None
        async with session.get(f"{cluster.web_url}events?since={version.group(1)}") as response:
            assert response.headers["Content-Type"] == "text/event-stream"
            stream = Stream(response)
            await cluster.client.create(RESOURCE_CLAIMS, NINE_GPUS, "default")
            card = await stream.until("pending", r"InsufficientDevices")  # dgx-h100-0 has 8 of the 9
            assert "<td>dgx-h100-0</td>" in card and "9" in card
            await cluster.client.create(MIGLAYOUTS, BALANCED)
            node = await stream.until("nodes", lambda html: html.count('data-profile="3g.40gb"') == 8, 60)
            assert 'data-frag="node/dgx-h100-0"' in node  # every GPU repartitioned, GPU by GPU as it happens
            layout = await stream.until("layouts", r"success")
            assert 'data-frag="layout/balanced"' in layout
            await cluster.client.delete(RESOURCE_CLAIMS, "nine", "default")
            await stream.until("summary", r"<b>0</b> pending")
            assert stream.fragments["pending"] == {}


async def test_a_late_client_gets_everything_and_health_reports_synced(cluster: EmbeddedCluster) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{cluster.web_url}events?since=0") as response:
            stream = Stream(response)
            await stream.until("nodes", r"l4x4-0")
            assert set(stream.fragments["nodes"]) == {"node/dgx-h100-0", "node/l4x4-0"}
        async with session.get(f"{cluster.web_url}healthz") as response:
            assert response.status == 200
