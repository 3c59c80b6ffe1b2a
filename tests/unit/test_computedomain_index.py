"""Daemon indices within a clique, channel leases, and which ComputeDomains may share a node."""

from __future__ import annotations

import pytest

from gpudra.api.computedomain import ComputeDomainClique, ComputeDomainDaemonInfo
from gpudra.api.meta import ObjectMeta
from gpudra.computedomain.index import (
    IMEX_CHANNEL_COUNT,
    MAX_NODES_PER_CLIQUE,
    ChannelLease,
    DomainRef,
    assign_channels,
    check_node_admits,
    register_daemon,
    release_departed,
)
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


def join(clique: ComputeDomainClique, *nodes: str) -> ComputeDomainClique:
    for node in nodes:
        clique = register_daemon(clique, report(node))
    return clique


def indices(clique: ComputeDomainClique) -> dict[str, int | None]:
    return {d.node_name: d.index for d in clique.daemons or []}


def test_fill_to_eighteen_then_the_nineteenth_fails_clearly() -> None:
    nodes = [f"tray-{i:02d}" for i in range(MAX_NODES_PER_CLIQUE)]
    clique = join(empty_clique(), *nodes)
    assert indices(clique) == {node: i for i, node in enumerate(nodes)}
    with pytest.raises(CliqueFullError) as caught:
        register_daemon(clique, report("tray-18"))
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
            clique = register_daemon(clique, report(node))
        elif action == "notready":
            clique = register_daemon(clique, report(node, status="NotReady"))
        else:
            present = [d.node_name for d in clique.daemons or [] if d.node_name != node]
            clique = release_departed(clique, present)
    assert indices(clique) == expected


def test_full_clique_accepts_a_node_again_after_node_loss() -> None:
    nodes = [f"tray-{i:02d}" for i in range(MAX_NODES_PER_CLIQUE)]
    clique = join(empty_clique(), *nodes)
    clique = release_departed(clique, [n for n in nodes if n != "tray-05"])
    clique = register_daemon(clique, report("tray-18"))
    assert indices(clique)["tray-18"] == 5


def test_status_refresh_updates_address_and_status_but_not_index() -> None:
    clique = join(empty_clique(), "n0", "n1")
    refreshed = register_daemon(
        clique, report("n1", status="NotReady").model_copy(update={"ip_address": "10.9.9.9"})
    )
    (entry,) = [d for d in refreshed.daemons or [] if d.node_name == "n1"]
    assert (entry.index, entry.status, entry.ip_address) == (1, "NotReady", "10.9.9.9")


def test_report_from_another_clique_is_rejected() -> None:
    with pytest.raises(InvalidInputError, match="changed clique"):
        register_daemon(empty_clique(), report("n0", clique="other.3"))


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
def test_node_admission(mode: str, on_node: list[DomainRef], fails: bool) -> None:
    if not fails:
        check_node_admits("node-1", A, on_node, mode)  # type: ignore[arg-type]
        return
    with pytest.raises(ComputeDomainPlacementError) as caught:
        check_node_admits("node-1", A, on_node, mode)  # type: ignore[arg-type]
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
    mode: str, joining: DomainRef, leases: dict[str, tuple[DomainRef, ChannelLease]], expected: ChannelLease
) -> None:
    assert assign_channels(joining, leases, mode, clique_id=CLIQUE) == expected  # type: ignore[arg-type]


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
