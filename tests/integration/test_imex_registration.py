"""IMEX daemons registering in one ComputeDomainClique against the embedded API server: 18 at once get
distinct indices without a conflict storm, a 19th is refused with the clique named, and leaving frees an
index that the next daemon takes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpudra.agent.computedomain.daemon import DaemonIdentity, run_daemon
from gpudra.agent.computedomain.registration import CliqueRegistration
from gpudra.api.computedomain import ComputeDomainClique
from gpudra.api.crdgen import crd_for
from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.computedomain.names import clique_object_name
from gpudra.errors import CliqueFullError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import COMPUTE_DOMAIN_CLIQUES, CRDS, NAMESPACES

NS = "gpudra"
DOMAIN = "4c1d2e3f-0000-4000-8000-000000000001"
CLIQUE = "6b3f7d0e-2c1a-4f55-9e0b-1d2c3b4a5f60.32766"


@pytest.fixture
async def client(apiserver: EmbeddedAPIServer) -> AsyncIterator[KubeClient]:
    kube = KubeClient.for_url(apiserver.url)
    await kube.apply_object(CRDS, crd_for(ComputeDomainClique))
    await kube.apply_object(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    try:
        yield kube
    finally:
        await kube.close()


def registration(client: KubeClient, tray: int) -> CliqueRegistration:
    return CliqueRegistration(
        client,
        namespace=NS,
        domain_uid=DOMAIN,
        clique_id=CLIQUE,
        node_name=f"tray-{tray}",
        ip_address=f"10.0.0.{tray}",
    )


async def daemons(client: KubeClient) -> list[tuple[str, int, str]]:
    body = await client.get(COMPUTE_DOMAIN_CLIQUES, clique_object_name(DOMAIN, CLIQUE), NS)
    return [(d["nodeName"], d["index"], d["status"]) for d in body.get("daemons") or []]


async def test_eighteen_daemons_at_once_get_distinct_indices(client: KubeClient) -> None:
    regs = [registration(client, i) for i in range(18)]
    indices = await asyncio.gather(*(r.report("NotReady") for r in regs))
    assert sorted(indices) == list(range(18))
    conflicts = sum(r.conflicts for r in regs)
    # daemons retrying in lockstep collide 17 + 16 + ... + 1 = 153 times; randomized backoff spreads them out
    assert conflicts < 17 * 18 // 2, conflicts
    with pytest.raises(CliqueFullError, match=f"clique {CLIQUE}: all 18 daemon indices are taken"):
        await registration(client, 18).report("NotReady")

    await regs[7].release()
    assert await registration(client, 18).report("Ready") == indices[7]
    assert ("tray-18", indices[7], "Ready") in await daemons(client)
    assert await regs[0].report("Ready") == indices[0]  # a known node keeps its index when its status changes


async def test_registered_daemons_turning_ready_together_do_not_conflict(
    client: KubeClient, apiserver: EmbeddedAPIServer
) -> None:
    regs = [registration(client, i) for i in range(18)]
    for r in regs:
        await r.report("NotReady")
    before = apiserver.conflicts_by_resource["computedomaincliques"]
    indices = await asyncio.gather(*(r.report("Ready") for r in regs))
    assert indices == list(range(18))
    assert apiserver.conflicts_by_resource["computedomaincliques"] == before
    assert await daemons(client) == [(f"tray-{i}", i, "Ready") for i in range(18)]


async def test_an_entry_moved_between_read_and_write_is_refreshed_on_a_fresh_read(
    client: KubeClient, apiserver: EmbeddedAPIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    regs = [registration(client, i) for i in range(3)]
    for r in regs:
        await r.report("NotReady")
    await regs[0].release()
    newcomer = registration(client, 9)
    assert await newcomer.report("NotReady") == 0  # the freed lowest index, first in the list
    own = KubeClient.for_url(apiserver.url)
    read = own.get

    async def read_then_newcomer_leaves(*args: Any, **kwargs: Any) -> dict[str, Any]:
        body = await read(*args, **kwargs)
        monkeypatch.setattr(own, "get", read)
        await newcomer.release()  # tray-2's entry moves up the list after tray-2 read it
        return body

    monkeypatch.setattr(own, "get", read_then_newcomer_leaves)
    moved = registration(own, 2)
    try:
        assert await moved.report("Ready") == 2
    finally:
        await own.close()
    assert moved.conflicts == 1  # the patch's test of the position read failed once
    assert await daemons(client) == [("tray-1", 1, "NotReady"), ("tray-2", 2, "Ready")]


async def test_simulated_daemon_reports_ready_and_releases_on_stop(client: KubeClient) -> None:
    stop = asyncio.Event()
    identity = DaemonIdentity(NS, DOMAIN, CLIQUE, "tray-3", "10.0.0.3")
    task = asyncio.create_task(run_daemon(client, identity, stop=stop))

    async def ready() -> bool:
        try:
            return await daemons(client) == [("tray-3", 0, "Ready")]
        except Exception:
            return False

    for _ in range(200):
        if await ready():
            break
        await asyncio.sleep(0.02)
    assert await ready()
    stop.set()
    await asyncio.wait_for(task, 10)
    assert await daemons(client) == []
