"""Pure: the web view's cards of what runs on the fleet, from watched objects: claims by namespace (devices, pods,
Ready and Healthy), pending claims with the allocator's explanation (``gpudra.allocator.explanation``: the same
words as the claim's Event and ``gpudra explain``, node by node), ComputeDomains (nodes, cliques, daemons, why not
Ready) and MigLayouts (progress per node, what blocks them)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpudra.allocator.explanation import ClosestDevice, Explanation, NodeLine

Body = Mapping[str, Any]


def _conditions(obj: Body) -> list[Mapping[str, Any]]:
    return list(obj.get("conditions") or [])


@dataclass(frozen=True)
class ConditionView:
    type: str
    status: str
    reason: str = ""
    message: str = ""


def condition_views(conditions: Iterable[Mapping[str, Any]]) -> tuple[ConditionView, ...]:
    return tuple(
        ConditionView(
            str(c.get("type", "")),
            str(c.get("status", "")),
            str(c.get("reason") or ""),
            str(c.get("message") or ""),
        )
        for c in conditions
    )


# ---------------------------------------------------------------- claims


@dataclass(frozen=True)
class ClaimDevice:
    request: str
    driver: str
    pool: str
    device: str
    ready: ConditionView | None = None
    healthy: ConditionView | None = None


@dataclass(frozen=True)
class ClaimRow:
    namespace: str
    name: str
    state: str  # pending, allocated, reserved (a pod uses it)
    devices: tuple[ClaimDevice, ...]
    pods: tuple[str, ...]


def claim_row(claim: Body) -> ClaimRow:
    meta = claim.get("metadata") or {}
    status = claim.get("status") or {}
    allocation = status.get("allocation") or {}
    reserved = [r for r in status.get("reservedFor") or [] if r.get("resource") == "pods"]
    entries = {(d.get("driver"), d.get("pool"), d.get("device")): d for d in status.get("devices") or []}
    devices = []
    for result in (allocation.get("devices") or {}).get("results") or []:
        key = (result.get("driver"), result.get("pool"), result.get("device"))
        found = {c.type: c for c in condition_views(_conditions(entries.get(key) or {}))}
        devices.append(
            ClaimDevice(
                request=str(result.get("request", "")),
                driver=str(key[0] or ""),
                pool=str(key[1] or ""),
                device=str(key[2] or ""),
                ready=found.get("Ready"),
                healthy=found.get("Healthy"),
            )
        )
    state = "reserved" if status.get("reservedFor") else "allocated" if allocation else "pending"
    return ClaimRow(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        state=state,
        devices=tuple(devices),
        pods=tuple(sorted(str(r.get("name", "")) for r in reserved)),
    )


def claims_by_namespace(claims: Iterable[Body]) -> dict[str, list[ClaimRow]]:
    """Namespace -> its claims' rows by name, namespaces in name order."""
    rows: dict[str, list[ClaimRow]] = {}
    for row in sorted((claim_row(c) for c in claims), key=lambda r: (r.namespace, r.name)):
        rows.setdefault(row.namespace, []).append(row)
    return rows


# ---------------------------------------------------------------- pending claims


@dataclass(frozen=True)
class PendingCard:
    """A pending claim and what ``gpudra explain`` says of it: the sentences its Event carries, the nodes nearest
    first with what keeps the claim from each, and the closest devices."""

    namespace: str
    name: str
    reason: str  # the reason code (Events, metrics)
    headline: str
    sentences: tuple[str, ...] = ()
    nodes: tuple[NodeLine, ...] = ()
    closest: tuple[ClosestDevice, ...] = ()
    fits_on: str | None = None  # it would fit now (the scheduler has not got to it yet)


def pending_card(claim: Body, outcome: Explanation | str) -> PendingCard:
    """A pending claim with its explanation, or with the node it would fit on now."""
    meta = claim.get("metadata") or {}
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    if isinstance(outcome, str):
        headline = f"fits on node {outcome} now; waiting for the scheduler (or for a pod that uses it)"
        return PendingCard(namespace, name, "", headline, fits_on=outcome)
    return PendingCard(
        namespace, name, outcome.reason, outcome.headline, outcome.sentences, outcome.nodes, outcome.closest
    )


# ---------------------------------------------------------------- ComputeDomains


@dataclass(frozen=True)
class DomainNode:
    name: str
    clique: str
    index: int | None
    status: str
    reason: str = ""  # why it is not Ready (its daemon's message)


@dataclass(frozen=True)
class CliqueDaemon:
    node: str
    index: int | None
    status: str
    message: str = ""


@dataclass(frozen=True)
class DomainCard:
    namespace: str
    name: str
    status: str
    num_nodes: int
    nodes: tuple[DomainNode, ...]
    cliques: tuple[tuple[str, tuple[CliqueDaemon, ...]], ...]  # (clique id, its daemons)
    problems: tuple[ConditionView, ...]  # conditions that are not True


def domain_card(domain: Body, cliques: Iterable[Body]) -> DomainCard:
    """A ComputeDomain with the cliques named ``<its uid>.<clique id>``."""
    meta = domain.get("metadata") or {}
    status = domain.get("status") or {}
    uid = str(meta.get("uid", ""))
    mine = sorted(
        (c for c in cliques if str((c.get("metadata") or {}).get("name", "")).startswith(f"{uid}.")),
        key=lambda c: str(c["metadata"]["name"]),
    )
    daemons: dict[str, CliqueDaemon] = {}
    clique_rows = []
    for clique in mine:
        members = tuple(
            CliqueDaemon(
                str(d.get("nodeName", "")),
                d.get("index"),
                str(d.get("status", "NotReady")),
                str(d.get("message") or ""),
            )
            for d in sorted(
                clique.get("daemons") or [], key=lambda d: (d.get("index") is None, d.get("index"))
            )
        )
        daemons.update({d.node: d for d in members})
        clique_rows.append((str(clique["metadata"]["name"]).removeprefix(f"{uid}."), members))
    nodes = []
    for node in sorted(status.get("nodes") or [], key=lambda n: str(n.get("name", ""))):
        state = str(node.get("status", "NotReady"))
        daemon = daemons.get(str(node.get("name", "")))
        reason = ""
        if state != "Ready":
            reason = (
                daemon.message
                if daemon and daemon.message
                else ("its IMEX daemon is not Ready" if daemon else "no IMEX daemon registered yet")
            )
        nodes.append(
            DomainNode(
                str(node.get("name", "")), str(node.get("cliqueID", "")), node.get("index"), state, reason
            )
        )
    return DomainCard(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        status=str(status.get("status", "NotReady")),
        num_nodes=int((domain.get("spec") or {}).get("numNodes") or 0),
        nodes=tuple(nodes),
        cliques=tuple(clique_rows),
        problems=tuple(c for c in condition_views(_conditions(status)) if c.status != "True"),
    )


# ---------------------------------------------------------------- MigLayouts


@dataclass(frozen=True)
class LayoutNode:
    name: str
    state: str
    message: str
    blocked_by: tuple[str, ...]


@dataclass(frozen=True)
class LayoutCard:
    name: str
    policy: str
    source: str  # "config all-balanced" or "2 inline entries"
    applied: str  # "3/4"
    nodes: tuple[LayoutNode, ...]
    conditions: tuple[ConditionView, ...]
    states: Mapping[str, int]  # nodes per state


def layout_card(layout: Body) -> LayoutCard:
    spec = layout.get("spec") or {}
    status = layout.get("status") or {}
    source = spec.get("layout") or {}
    if source.get("config"):
        where = (source.get("configMap") or {}).get("name")
        text = f"config {source['config']}" + (f" (ConfigMap {where})" if where else "")
    else:
        n = len(source.get("entries") or [])
        text = f"{n} inline entr{'y' if n == 1 else 'ies'}"
    nodes = tuple(
        LayoutNode(
            str(n.get("name", "")),
            str(n.get("state", "pending")),
            str(n.get("message") or ""),
            tuple(n.get("blockedBy") or ()),
        )
        for n in sorted(status.get("nodes") or [], key=lambda n: str(n.get("name", "")))
    )
    return LayoutCard(
        name=str((layout.get("metadata") or {}).get("name", "")),
        policy=str(spec.get("policy", "Static")),
        source=text,
        applied=str(status.get("applied") or f"{status.get('nodesApplied') or 0}/{len(nodes)}"),
        nodes=nodes,
        conditions=condition_views(_conditions(status)),
        states=dict(Counter(n.state for n in nodes)),
    )
