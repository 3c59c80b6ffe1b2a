"""gpudra.testing against the embedded API server: watch_until sees an object that already passes, a change made
after it started watching, and says so when nothing passes in time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import NAMESPACES
from gpudra.testing import eventually, watch_until


@pytest.fixture
async def client(apiserver: EmbeddedAPIServer) -> AsyncIterator[KubeClient]:
    kube = KubeClient.for_url(apiserver.url, token=apiserver.token())
    try:
        yield kube
    finally:
        await kube.close()


def namespace(name: str, team: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"team": team}}}


def labelled(team: str) -> Any:
    return lambda obj: obj["metadata"].get("labels", {}).get("team") == team


async def test_watch_until_returns_what_already_passes(client: KubeClient) -> None:
    await client.create(NAMESPACES, namespace("ml", "inference"))
    found = await watch_until(client, NAMESPACES, labelled("inference"), timeout=5)
    assert found["metadata"]["name"] == "ml"


async def test_watch_until_sees_a_change_made_after_it_listed(client: KubeClient) -> None:
    await client.create(NAMESPACES, namespace("ml", "inference"))
    waiting = asyncio.create_task(watch_until(client, NAMESPACES, labelled("training"), timeout=10))
    await client.create(NAMESPACES, namespace("other", "inference"))
    await client.patch(NAMESPACES, "ml", {"metadata": {"labels": {"team": "training"}}})
    found = await waiting
    assert found["metadata"]["name"] == "ml" and found["metadata"]["labels"]["team"] == "training"


async def test_watch_until_and_eventually_fail_with_what_they_waited_for(client: KubeClient) -> None:
    with pytest.raises(AssertionError, match=r"no namespaces passed the test within 0\.3s"):
        await watch_until(client, NAMESPACES, labelled("nobody"), timeout=0.3)

    async def never() -> int:
        return 0

    with pytest.raises(AssertionError, match=r"the count not met within 0\.2s \(last value 0\)"):
        await eventually(never, 0.2, what="the count")


async def test_eventually_takes_a_plain_check_of_state_in_memory() -> None:
    """A check that reads state in memory needs no coroutine: eventually calls it between the loop's turns."""
    seen: list[int] = []
    loop = asyncio.get_running_loop()
    for n in range(3):
        loop.call_soon(seen.append, n)  # after eventually's first look
    assert await eventually(lambda: len(seen) == 3 and seen, timeout=5) == [0, 1, 2]
    with pytest.raises(AssertionError, match="last value False"):
        await eventually(lambda: False, timeout=0.1, what="never")
