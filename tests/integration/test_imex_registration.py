"""IMEX daemons registering in ComputeDomainCliques against the embedded API server: 18 at once get distinct
indices, the lowest free ones, without a single conflict or failed patch test (counted by the server, read from
its debug endpoint as the benchmark reads it); a 19th is refused with the clique named; leaving frees an index
that the next daemon takes; daemons joining while others leave still end with distinct indices."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest

from gpudra.agent.computedomain.daemon import DaemonIdentity, run_daemon
from gpudra.agent.computedomain.registration import CliqueRegistration, failed_test
from gpudra.api.computedomain import ComputeDomainClique
from gpudra.api.crdgen import crd_for
from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.cluster.apiserver.server import CONFLICTS_PATH, FAILED_TEST
from gpudra.computedomain.names import clique_object_name
from gpudra.errors import CliqueFullError, KubeError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import COMPUTE_DOMAIN_CLIQUES, CRDS, NAMESPACES

NS = "gpudra"
DOMAIN = "4c1d2e3f-0000-4000-8000-000000000001"
CLIQUE = "6b3f7d0e-2c1a-4f55-9e0b-1d2c3b4a5f60.32766"


@pytest.fixture
async def client(apiserver: EmbeddedAPIServer) -> AsyncIterator[KubeClient]:
    kube = KubeClient.for_url(apiserver.url, token=apiserver.token())
    await kube.apply_object(CRDS, crd_for(ComputeDomainClique))
    await kube.apply_object(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    try:
        yield kube
    finally:
        await kube.close()


def registration(client: KubeClient, tray: int, clique: str = CLIQUE) -> CliqueRegistration:
    return CliqueRegistration(
        client,
        namespace=NS,
        domain_uid=DOMAIN,
        clique_id=clique,
        node_name=f"tray-{tray}",
        ip_address=f"10.0.0.{tray}",
    )


async def daemons(client: KubeClient, clique: str = CLIQUE) -> list[tuple[str, int, str]]:
    body = await client.get_raw(COMPUTE_DOMAIN_CLIQUES, clique_object_name(DOMAIN, clique), NS)
    return [(d["nodeName"], d["index"], d["status"]) for d in body.get("daemons") or []]


async def redone_writes(apiserver: EmbeddedAPIServer) -> int:
    """409s and failed JSON patch tests on clique objects, from the server's debug endpoint."""
    async with (
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {apiserver.token()}"}) as session,
        session.get(apiserver.url + CONFLICTS_PATH) as response,
    ):
        counts: dict[str, int] = await response.json()
    return counts.get("computedomaincliques", 0) + counts.get("computedomaincliques" + FAILED_TEST, 0)


async def test_eighteen_daemons_at_once_get_the_lowest_indices_without_a_conflict(
    client: KubeClient, apiserver: EmbeddedAPIServer
) -> None:
    regs = [registration(client, i) for i in range(18)]
    indices = await asyncio.gather(*(r.report("NotReady") for r in regs))
    assert sorted(indices) == list(range(18))
    # each joined by apply and wrote its dealt index once: nothing to redo (before: 2 to 3 per daemon)
    assert sum(r.conflicts for r in regs) == 0
    assert await redone_writes(apiserver) == 0
    with pytest.raises(CliqueFullError, match=f"clique {CLIQUE}: all 18 daemon indices are taken"):
        await registration(client, 18).report("NotReady")
    assert "tray-18" not in [node for node, _, _ in await daemons(client)]  # refused: its entry is gone

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
    indices = await asyncio.gather(*(r.report("Ready") for r in regs))
    assert indices == list(range(18))
    assert await redone_writes(apiserver) == 0
    assert await daemons(client) == [(f"tray-{i}", i, "Ready") for i in range(18)]


async def test_an_entry_moved_since_the_last_write_is_refreshed_on_a_fresh_read(
    client: KubeClient, apiserver: EmbeddedAPIServer
) -> None:
    regs = [registration(client, i) for i in range(3)]
    for r in regs:
        await r.report("NotReady")
    await regs[0].release()  # tray-2's entry moves up the list after tray-2 last saw it
    assert await regs[2].report("Ready") == 2
    assert regs[2].conflicts == 1  # the patch's test of the position it knew failed once
    assert await redone_writes(apiserver) == 1
    assert await daemons(client) == [("tray-1", 1, "NotReady"), ("tray-2", 2, "Ready")]
    newcomer = registration(client, 9)
    assert await newcomer.report("NotReady") == 0  # the freed lowest index, appended last
    assert await daemons(client) == [
        ("tray-1", 1, "NotReady"),
        ("tray-2", 2, "Ready"),
        ("tray-9", 0, "NotReady"),
    ]


async def test_daemons_of_several_cliques_joining_while_others_leave_end_with_distinct_indices(
    client: KubeClient,
) -> None:
    """A node leaving changes the deal, so the writes planned before it fail their tests and are redone on
    a fresh read: whatever the interleaving, every clique ends with distinct indices."""
    cliques = [f"{CLIQUE[:-1]}{c}" for c in range(3)]
    early = [registration(client, i, clique) for clique in cliques for i in range(6)]
    await asyncio.gather(*(r.report("Ready") for r in early))
    leaving = [r for r in early if int(r.node_name.split("-")[1]) % 2 == 0]
    late = [registration(client, i, clique) for clique in cliques for i in range(6, 18)]
    await asyncio.gather(*(r.release() for r in leaving), *(r.report("NotReady") for r in late))
    for clique in cliques:
        held = {node: index for node, index, _ in await daemons(client, clique)}
        assert sorted(held) == sorted(f"tray-{i}" for i in [1, 3, 5, *range(6, 18)]), clique
        # distinct; each was the lowest free one when its node registered (which, depending on when the others
        # left, need not make them the 15 lowest at the end)
        assert len(set(held.values())) == 15 and max(held.values()) < 18, (clique, held)


@pytest.mark.parametrize(
    ("status", "message", "redone"),
    [
        # kube-apiserver (v1.37) answers a JSON patch whose test failed with this, and no cause
        (422, "patch x: 422 Invalid: the server rejected our request due to an error in our request", True),
        (
            422,
            "patch x: 422 Invalid: the test of '/daemons/2/nodeName' failed: expected 'a', found 'b'",
            True,
        ),
        # the admission policy's refusal would fail again: raised, not redone
        (
            422,
            'patch x: 422 Invalid: computedomaincliques.resource.nvidia.com "x" is forbidden: '
            "ValidatingAdmissionPolicy 'gpudra-own-clique-entry' with binding 'gpudra-own-clique-entry' denied "
            "request: the IMEX daemon of node the-test-of-a may change only its own node's entry",
            False,
        ),
        (403, 'patch x: 403 Forbidden: User "u" cannot patch resource "computedomaincliques"', False),
    ],
)
def test_only_a_failed_patch_test_is_redone(status: int, message: str, redone: bool) -> None:
    assert failed_test(KubeError(message, status=status)) is redone


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
