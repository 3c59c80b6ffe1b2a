"""Pure: the web view's cards of what runs on the fleet, from watched objects: claims by namespace (devices, pods,
Ready and Healthy), pending claims with the allocator's explanation (``gpudra.allocator.explain.explanation``: the same
words as the claim's Event and ``gpudra explain``, node by node), allocated claims their driver could not prepare
(``gpudra.planning.preparestatus``), ComputeDomains (nodes, cliques, daemons, why not Ready) and MigLayouts
(progress per node, what blocks them)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpudra.allocator import ClosestDevice, Explanation, NodeLine
from gpudra.api.computedomain import ComputeDomain, ComputeDomainClique, ComputeDomainStatus
from gpudra.api.dra import ResourceClaim
from gpudra.api.meta import Condition
from gpudra.api.miglayout import MigLayout, MigLayoutStatus
from gpudra.planning.claimcreation import NOT_CREATED_REASON, UnmadeClaim, not_created_note, unmade_words
from gpudra.planning.podnodes import NO_NODE_REASON
from gpudra.planning.podscheduling import Unschedulable, gate_words
from gpudra.planning.preparestatus import RETRY_WORDS, NotPrepared, not_prepared_words


@dataclass(frozen=True)
class ConditionView:
    type: str
    status: str
    reason: str = ""
    message: str = ""


def condition_views(conditions: Iterable[Condition] | None) -> tuple[ConditionView, ...]:
    return tuple(ConditionView(c.type, c.status, c.reason, c.message) for c in conditions or ())


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


def claim_row(claim: ResourceClaim) -> ClaimRow:
    meta = claim.metadata
    status = claim.status
    allocation = claim.allocation
    reserved_for = (status.reserved_for if status is not None else None) or []
    entries = {
        (d.driver, d.pool, d.device): d for d in (status.devices if status is not None else None) or []
    }
    devices = []
    for result in allocation.results if allocation is not None else []:
        entry = entries.get((result.driver, result.pool, result.device))
        found = {c.type: c for c in condition_views(entry.conditions if entry is not None else None)}
        devices.append(
            ClaimDevice(
                request=result.request,
                driver=result.driver,
                pool=result.pool,
                device=result.device,
                ready=found.get("Ready"),
                healthy=found.get("Healthy"),
            )
        )
    state = "reserved" if reserved_for else "allocated" if allocation is not None else "pending"
    return ClaimRow(
        namespace=meta.namespace or "",
        name=meta.name or "",
        state=state,
        devices=tuple(devices),
        pods=tuple(sorted(r.name for r in reserved_for if r.resource == "pods")),
    )


def claims_by_namespace(claims: Iterable[ResourceClaim]) -> dict[str, list[ClaimRow]]:
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
    kept_off: tuple[tuple[str, str], ...] = ()
    """The nodes with devices its pod cannot go to, and why (``gpudra.planning.podnodes``): it is explained over
    the others."""


def pending_card(
    claim: ResourceClaim,
    outcome: Explanation | str,
    kept_off: Mapping[str, str] | None = None,
    gates: tuple[str, ...] = (),
    stuck: Unschedulable | None = None,
) -> PendingCard:
    """A pending claim with its explanation, or with the node it would fit on now; ``kept_off``: the nodes its pod
    cannot go to, which the explanation left out; ``gates``: the scheduling gates that hold its pod, said first;
    ``stuck``: kube-scheduler's word on its pod, said of a claim that fits (``gpudra.planning.podscheduling``)."""
    namespace, name = claim.metadata.namespace or "", claim.metadata.name or ""
    kept = tuple(sorted((kept_off or {}).items()))
    held = tuple(gate_words(gates, namespace)) if gates else ()
    if isinstance(outcome, str):
        waits = held[0] if held else "waiting for the scheduler (or for a pod that uses it)"
        if stuck is not None and not held:
            waits = stuck.words()
        headline = f"fits on node {outcome} now; {waits}"
        return PendingCard(namespace, name, "", headline, held[1:], fits_on=outcome, kept_off=kept)
    return PendingCard(
        namespace,
        name,
        outcome.reason,
        outcome.headline,
        (*held, *outcome.sentences),
        outcome.nodes,
        outcome.closest,
        kept_off=kept,
    )


def nowhere_card(claim: ResourceClaim, kept_off: Mapping[str, str]) -> PendingCard:
    """A pending claim whose pod kube-scheduler's node filters keep off every node that publishes devices: no
    scheduler allocates it while they do."""
    namespace, name = claim.metadata.namespace or "", claim.metadata.name or ""
    headline = "will not be allocated: its pod's node filters leave no node with devices"
    return PendingCard(namespace, name, NO_NODE_REASON, headline, kept_off=tuple(sorted(kept_off.items())))


def stranded_card(claim: ResourceClaim, reason: str, words: str) -> PendingCard:
    """A pending claim no scheduler will allocate (``gpudra.planning.boundclaims``), with what its Event says:
    as ``gpudra explain`` answers it."""
    namespace, name = claim.metadata.namespace or "", claim.metadata.name or ""
    return PendingCard(namespace, name, reason, "will not be allocated", (words,))


def unmade_card(unmade: UnmadeClaim) -> PendingCard:
    """A waiting pod's claim kube-controller-manager has not made from its template: no claim to allocate yet."""
    headline = f"{not_created_note(unmade.template)} (pod {unmade.pod})"
    return PendingCard(unmade.namespace, unmade.name, NOT_CREATED_REASON, headline, (unmade_words(unmade),))


def unprepared_card(claim: ResourceClaim, devices: tuple[NotPrepared, ...]) -> PendingCard:
    """An allocated claim whose driver could not prepare ``devices`` (``not_prepared(claim)``, not empty): its
    pods wait in ContainerCreating. Its reason is the first failure's; each distinct failure is a sentence, then
    when the kubelet tries again, as ``gpudra explain`` says it."""
    namespace, name = claim.metadata.namespace or "", claim.metadata.name or ""
    node = claim.allocation.node if claim.allocation is not None else None
    headline = (
        f"allocated{f' on node {node}' if node else ''}, not prepared: its pods wait in ContainerCreating"
    )
    return PendingCard(
        namespace, name, devices[0].reason, headline, (*not_prepared_words(devices), RETRY_WORDS)
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


def domain_card(domain: ComputeDomain, cliques: Iterable[ComputeDomainClique]) -> DomainCard:
    """A ComputeDomain with the cliques named ``<its uid>.<clique id>``."""
    meta = domain.metadata
    status = domain.status or ComputeDomainStatus()
    uid = meta.uid or ""
    mine = sorted(
        (c for c in cliques if (c.metadata.name or "").startswith(f"{uid}.")),
        key=lambda c: c.metadata.name or "",
    )
    daemons: dict[str, CliqueDaemon] = {}
    clique_rows = []
    for clique in mine:
        members = tuple(
            CliqueDaemon(d.node_name, d.index, d.status, d.message or "")
            for d in sorted(clique.daemons or [], key=lambda d: (d.index is None, d.index))
        )
        daemons.update({d.node: d for d in members})
        clique_rows.append(((clique.metadata.name or "").removeprefix(f"{uid}."), members))
    nodes = []
    for node in sorted(status.nodes or [], key=lambda n: n.name):
        daemon = daemons.get(node.name)
        reason = ""
        if node.status != "Ready":
            reason = (
                daemon.message
                if daemon and daemon.message
                else ("its IMEX daemon is not Ready" if daemon else "no IMEX daemon registered yet")
            )
        nodes.append(DomainNode(node.name, node.clique_id, node.index, node.status, reason))
    return DomainCard(
        namespace=meta.namespace or "",
        name=meta.name or "",
        status=status.status,
        num_nodes=domain.spec.num_nodes,
        nodes=tuple(nodes),
        cliques=tuple(clique_rows),
        problems=tuple(c for c in condition_views(status.conditions) if c.status != "True"),
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


def layout_card(layout: MigLayout) -> LayoutCard:
    source = layout.spec.layout
    status = layout.status or MigLayoutStatus()
    if source.config:
        where = source.config_map.name if source.config_map is not None else None
        text = f"config {source.config}" + (f" (ConfigMap {where})" if where else "")
    else:
        n = len(source.entries or [])
        text = f"{n} inline entr{'y' if n == 1 else 'ies'}"
    nodes = tuple(
        LayoutNode(n.name, n.state, n.message, tuple(n.blocked_by or ()))
        for n in sorted(status.nodes or [], key=lambda n: n.name)
    )
    return LayoutCard(
        name=layout.metadata.name or "",
        policy=layout.spec.policy,
        source=text,
        applied=status.applied or f"{status.nodes_applied or 0}/{len(nodes)}",
        nodes=nodes,
        conditions=condition_views(status.conditions),
        states=dict(Counter(n.state for n in nodes)),
    )
