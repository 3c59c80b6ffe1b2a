"""Daemon indices within a clique (the deal, and the JSON patches that write them), channel leases, and which
ComputeDomains may share a node."""

from __future__ import annotations

import random
from typing import Any
from unittest.mock import ANY

import pytest

from gpudra.api.computedomain import ComputeDomainClique, ComputeDomainDaemonInfo
from gpudra.api.meta import ObjectMeta
from gpudra.cluster.apiserver import APIStatusError
from gpudra.cluster.apiserver.patches import json_patch
from gpudra.computedomain.entries import joining_entry, own_entry_patch, release_patch
from gpudra.computedomain.index import (
    IMEX_CHANNEL_COUNT,
    MAX_NODES_PER_CLIQUE,
    ChannelLease,
    DomainRef,
    assign_channels,
    check_node_admits,
    release_departed,
)
from gpudra.computedomain.names import DaemonMode
from gpudra.errors import CliqueFullError, ComputeDomainError, ComputeDomainPlacementError, InvalidInputError

CLIQUE = "5d1c9f62-0000-4000-8000-000000000001.7"
A = DomainRef("uid-a", "team/a")
B = DomainRef("uid-b", "team/b")
C = DomainRef("uid-c", "team/c")
A_ALL = DomainRef("uid-a", "team/a", "All")


def report(node: str, status: str = "Ready", clique: str = CLIQUE) -> ComputeDomainDaemonInfo:
    return ComputeDomainDaemonInfo.model_validate(
        {"nodeName": node, "ipAddress": f"10.0.0.{len(node)}", "cliqueID": clique, "status": status}
    )


def empty_clique() -> ComputeDomainClique:
    return ComputeDomainClique(
        api_version="resource.nvidia.com/v1beta1",
        kind="ComputeDomainClique",
        metadata=ObjectMeta(name=f"uid-a.{CLIQUE}", namespace="gpudra"),
    )


def appended(clique: ComputeDomainClique, node: str) -> ComputeDomainClique:
    """What the server-side apply of a joining node's entry does: append it (list-map, new key)."""
    entry = joining_entry(report(node))
    return clique.model_copy(update={"daemons": [*(clique.daemons or []), entry]})


def patched(clique: ComputeDomainClique, patch: list[dict[str, Any]]) -> ComputeDomainClique:
    """The API server applying a JSON patch (a failed test raises its 422)."""
    return ComputeDomainClique.from_wire(json_patch(clique.to_wire(), patch))


def settle(clique: ComputeDomainClique, info: ComputeDomainDaemonInfo) -> ComputeDomainClique:
    planned = own_entry_patch(clique, info)
    assert planned is not None
    return patched(clique, planned[1])


def register(clique: ComputeDomainClique, info: ComputeDomainDaemonInfo) -> ComputeDomainClique:
    """One node registering alone: join (if it has no entry), then write its entry."""
    if not any(d.node_name == info.node_name for d in clique.daemons or []):
        clique = appended(clique, info.node_name)
    return settle(clique, info)


def join(clique: ComputeDomainClique, *nodes: str) -> ComputeDomainClique:
    for node in nodes:
        clique = register(clique, report(node))
    return clique


def leave(clique: ComputeDomainClique, node: str) -> ComputeDomainClique:
    patch = release_patch(clique, node)
    assert patch is not None
    return patched(clique, patch)


def indices(clique: ComputeDomainClique) -> dict[str, int | None]:
    return {d.node_name: d.index for d in clique.daemons or []}


def test_fill_to_eighteen_then_the_nineteenth_fails_clearly() -> None:
    nodes = [f"tray-{i:02d}" for i in range(MAX_NODES_PER_CLIQUE)]
    clique = join(empty_clique(), *nodes)
    assert indices(clique) == {node: i for i, node in enumerate(nodes)}
    with pytest.raises(CliqueFullError) as caught:
        register(clique, report("tray-18"))
    message = str(caught.value)
    assert "tray-18" in message and CLIQUE in message and "18" in message and "tray-00" in message
    assert not caught.value.retryable


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        # re-registering (e.g. a NotReady -> Ready refresh) keeps the index
        ([("join", "n0"), ("join", "n1"), ("join", "n0")], {"n0": 0, "n1": 1}),
        # a NotReady daemon keeps its index
        ([("join", "n0"), ("join", "n1"), ("notready", "n0"), ("join", "n2")], {"n0": 0, "n1": 1, "n2": 2}),
        # a node that left frees its index; the next newcomer takes the lowest free one
        (
            [("join", "n0"), ("join", "n1"), ("join", "n2"), ("leave", "n1"), ("join", "n3")],
            {"n0": 0, "n2": 2, "n3": 1},
        ),
        # the node that left and comes back is a newcomer
        (
            [("join", "n0"), ("join", "n1"), ("leave", "n0"), ("join", "n2"), ("join", "n0")],
            {"n1": 1, "n2": 0, "n0": 2},
        ),
    ],
)
def test_index_rules(steps: list[tuple[str, str]], expected: dict[str, int]) -> None:
    clique = empty_clique()
    for action, node in steps:
        if action == "join":
            clique = register(clique, report(node))
        elif action == "notready":
            clique = register(clique, report(node, status="NotReady"))
        else:
            clique = leave(clique, node)
    assert indices(clique) == expected


@pytest.mark.parametrize("seed", range(5))
def test_nodes_joining_together_each_write_their_index_once_without_colliding(seed: int) -> None:
    """Every node plans its write from a state read at some moment after it joined; the writes arrive in any
    order. None fails its tests, and the indices are the lowest free ones in the order the nodes joined."""
    rng = random.Random(seed)
    clique = join(empty_clique(), "old-0", "old-1", "old-2")
    clique = leave(clique, "old-1")  # index 1 is free again
    nodes = [f"tray-{i:02d}" for i in range(12)]
    pending: dict[str, ComputeDomainClique] = {}  # node -> the state it read after joining
    order = nodes[:]
    while order or pending:
        if order and (not pending or rng.random() < 0.5):
            node = order.pop(0)
            clique = appended(clique, node)
            pending[node] = clique  # the apply's answer
            continue
        node = rng.choice(sorted(pending))
        read = pending.pop(node) if rng.random() < 0.5 else clique  # an old answer, or a fresh read
        pending.pop(node, None)
        planned = own_entry_patch(read, report(node, status="NotReady"))
        assert planned is not None
        clique = patched(clique, planned[1])
    expected = {"old-0": 0, "old-2": 2} | dict(zip(nodes, [1, *range(3, 14)], strict=True))
    assert indices(clique) == expected


def test_a_node_leaving_between_read_and_write_fails_the_write_and_a_fresh_read_gets_the_freed_index() -> (
    None
):
    clique = join(empty_clique(), "n0", "n1")
    clique = appended(clique, "n2")
    read = clique
    clique = leave(clique, "n0")
    planned = own_entry_patch(read, report("n2"))
    assert planned is not None and planned[0] == 2
    with pytest.raises(APIStatusError) as failed:
        patched(clique, planned[1])
    assert failed.value.status == 422
    assert indices(settle(clique, report("n2"))) == {"n1": 1, "n2": 0}


def test_the_deal_follows_the_joining_order_and_refuses_those_beyond_the_free_indices() -> None:
    nodes = [f"tray-{i:02d}" for i in range(MAX_NODES_PER_CLIQUE - 2)]
    clique = join(empty_clique(), *nodes)
    for node in ("late-a", "late-b", "late-c"):
        clique = appended(clique, node)
    assert own_entry_patch(clique, report("late-b")) == (17, ANY)
    with pytest.raises(
        CliqueFullError, match=r"16 daemon indices are taken .* the other 2 go to late-a, late-b, which"
    ):
        own_entry_patch(clique, report("late-c"))


def test_an_unchanged_entry_needs_no_write_and_a_refresh_touches_only_its_own_entry() -> None:
    clique = join(empty_clique(), "n0", "n1")
    assert own_entry_patch(clique, report("n1")) == (1, [])
    refreshed = own_entry_patch(
        clique, report("n1", status="NotReady").model_copy(update={"ip_address": "10.9.9.9"})
    )
    assert refreshed is not None
    index, patch = refreshed
    assert [op["op"] for op in patch] == ["test", "replace"] and patch[1]["path"] == "/daemons/1"
    (entry,) = [d for d in patched(clique, patch).daemons or [] if d.node_name == "n1"]
    assert (index, entry.index, entry.status, entry.ip_address) == (1, 1, "NotReady", "10.9.9.9")
    assert own_entry_patch(clique, report("n9")) is None  # no entry: it joins first
    assert release_patch(clique, "n9") is None


def test_release_departed_frees_the_indices_of_nodes_gone() -> None:
    nodes = [f"tray-{i:02d}" for i in range(MAX_NODES_PER_CLIQUE)]
    clique = join(empty_clique(), *nodes)
    clique = release_departed(clique, [n for n in nodes if n != "tray-05"])
    assert indices(register(clique, report("tray-18")))["tray-18"] == 5


def test_report_from_another_clique_is_rejected() -> None:
    with pytest.raises(InvalidInputError, match="changed clique"):
        own_entry_patch(appended(empty_clique(), "n0"), report("n0", clique="other.3"))


# ---------------------------------------------------------------- sharing nodes


@pytest.mark.parametrize(
    ("mode", "on_node", "fails"),
    [
        ("daemonset", [], False),
        ("daemonset", [A], False),  # its own daemon already there
        ("daemonset", [B], True),  # one IMEX daemon per node
        ("host-managed", [B, C], False),  # one shared daemon, domains split by channel
    ],
)
def test_node_admission(mode: DaemonMode, on_node: list[DomainRef], fails: bool) -> None:
    if not fails:
        check_node_admits("node-1", A, on_node, mode)
        return
    with pytest.raises(ComputeDomainPlacementError) as caught:
        check_node_admits("node-1", A, on_node, mode)
    message = str(caught.value)
    assert "node-1" in message and "team/a" in message and "team/b" in message and "host-managed" in message
    assert caught.value.retryable


@pytest.mark.parametrize(
    ("mode", "joining", "leases", "expected"),
    [
        ("daemonset", A, {"uid-b": (B, ChannelLease(0))}, ChannelLease(0)),
        ("daemonset", A_ALL, {}, ChannelLease(0, IMEX_CHANNEL_COUNT)),
        ("host-managed", A, {}, ChannelLease(0)),
        ("host-managed", A, {"uid-b": (B, ChannelLease(0)), "uid-c": (C, ChannelLease(2))}, ChannelLease(1)),
        ("host-managed", A, {"uid-a": (A, ChannelLease(7)), "uid-b": (B, ChannelLease(0))}, ChannelLease(7)),
        ("host-managed", A_ALL, {}, ChannelLease(0, IMEX_CHANNEL_COUNT)),
    ],
)
def test_channel_leases(
    mode: DaemonMode,
    joining: DomainRef,
    leases: dict[str, tuple[DomainRef, ChannelLease]],
    expected: ChannelLease,
) -> None:
    assert assign_channels(joining, leases, mode, clique_id=CLIQUE) == expected


@pytest.mark.parametrize(
    ("joining", "leases", "needle"),
    [
        (A_ALL, {"uid-b": (B, ChannelLease(0))}, "needs every IMEX channel"),
        (
            A,
            {"uid-b": (DomainRef("uid-b", "team/b", "All"), ChannelLease(0, IMEX_CHANNEL_COUNT))},
            "holds every",
        ),
    ],
)
def test_all_mode_needs_the_clique_to_itself_in_host_managed_mode(
    joining: DomainRef, leases: dict[str, tuple[DomainRef, ChannelLease]], needle: str
) -> None:
    with pytest.raises(ComputeDomainPlacementError, match=needle) as caught:
        assign_channels(joining, leases, "host-managed", clique_id=CLIQUE)
    assert "team/a" in str(caught.value) and "team/b" in str(caught.value)


def test_channels_run_out_with_a_clear_message() -> None:
    leases = {f"u{i}": (DomainRef(f"u{i}", f"ns/d{i}"), ChannelLease(i)) for i in range(4)}
    with pytest.raises(ComputeDomainError, match="all 4 IMEX channels"):
        assign_channels(A, leases, "host-managed", clique_id=CLIQUE, channel_count=4)
