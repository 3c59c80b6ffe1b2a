"""Why a claim is (or would be) pending: the allocator run over what the cluster publishes right now.

Shared by ``gpudra explain`` and the controller's pending-claim Events, so both say the same: it reads slices,
classes, claims, namespaces and nodes through the client layer, builds the allocator's snapshot with every existing
allocation marked (and which claim holds each device), asks the allocator where the claim would fit, and words the
answer with the MIG planner's (``gpudra.allocator.explain.wording``). The allocator follows the API server's
Kubernetes version where Kubernetes' allocators differ (from 1.38 an ``All`` request meeting an incomplete pool
fails only that node). Nothing is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpudra.allocator import (
    DEFAULT_KUBE_MINOR,
    Allocation,
    Allocator,
    ClusterSnapshot,
    DeviceId,
    Explanation,
    Failure,
    NodeInfo,
    NodesFailure,
    Repartition,
    claim_key,
    examine,
    explain_outcome,
)
from gpudra.api.core import Namespace, Node
from gpudra.api.dra import DeviceClass, ResourceClaim, ResourceSlice
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import DEVICE_CLASSES, NAMESPACES, NODES, RESOURCE_CLAIMS, RESOURCE_SLICES
from gpudra.mig import (
    DemandPlan,
)
from gpudra.planning.migmodels import FleetMigModels
from gpudra.planning.podnodes import kept_off

Outcome = Allocation | Failure | NodesFailure
DETAIL_NODES = 16
Body = dict[str, Any]


@dataclass
class ClusterView:
    allocator: Allocator
    nodes: list[NodeInfo]
    pending: list[ResourceClaim] = field(default_factory=list)  # unallocated claims
    holders: dict[DeviceId, str] = field(
        default_factory=dict
    )  # allocated device -> namespace/name of its claim
    mig_models: FleetMigModels = field(default_factory=FleetMigModels)  # the MIG facts the nodes reported


def build_view(
    slices: Iterable[ResourceSlice],
    classes: Iterable[DeviceClass],
    claims: Iterable[ResourceClaim],
    namespaces: Iterable[Namespace],
    nodes: Iterable[Node],
    *,
    skip_claim_uid: str | None = None,
    kube_minor: int = DEFAULT_KUBE_MINOR,
) -> ClusterView:
    """Pure: the allocator over these objects, with every allocation but ``skip_claim_uid``'s marked in use,
    following the allocator of Kubernetes 1.``kube_minor``."""
    snapshot = ClusterSnapshot(slices)
    holders: dict[DeviceId, str] = {}
    pending: list[ResourceClaim] = []
    for claim in claims:
        allocation = claim.allocation
        if allocation is None:
            pending.append(claim)
        elif claim.metadata.uid != skip_claim_uid:
            snapshot.mark_allocated(allocation)
            for r in allocation.results:
                holders[DeviceId(r.driver, r.pool, r.device)] = claim.metadata.namespaced_name
    labels = {ns.metadata.name or "": ns.metadata.labels or {} for ns in namespaces}
    allocator = Allocator(snapshot, list(classes), namespace_labels=labels, kube_minor=kube_minor)
    listed = list(nodes)
    infos = sorted(
        (NodeInfo(n.metadata.name or "", n.metadata.labels or {}) for n in listed), key=lambda n: n.name
    )
    return ClusterView(allocator, infos, pending, holders, FleetMigModels.of_nodes(listed))


def view_from_wire(
    slices: Iterable[Body],
    classes: Iterable[Body],
    claims: Iterable[Body],
    namespaces: Iterable[Body],
    nodes: Iterable[Body],
    *,
    kube_minor: int = DEFAULT_KUBE_MINOR,
) -> ClusterView:
    """:func:`build_view` over objects in their wire form (the web view's worker process is sent them so: they
    cost less to send than models); each is parsed once here."""
    return build_view(
        (ResourceSlice.model_validate(s) for s in slices),
        (DeviceClass.model_validate(c) for c in classes),
        (ResourceClaim.model_validate(c) for c in claims),
        (Namespace.model_validate(n) for n in namespaces),
        (Node.model_validate(n) for n in nodes),
        kube_minor=kube_minor,
    )


async def load_view(
    client: KubeClient, *, skip_claim_uid: str | None = None, nodes: list[Node] | None = None
) -> ClusterView:
    """:func:`build_view` over what the cluster holds now, at the API server's minor (``/version``); ``nodes``:
    the cluster's nodes, when the caller has listed them already."""
    _, minor = await client.server_version()
    slices, _ = await client.list(RESOURCE_SLICES)
    classes, _ = await client.list(DEVICE_CLASSES)
    claims, _ = await client.list(RESOURCE_CLAIMS)
    namespaces, _ = await client.list(NAMESPACES)
    if nodes is None:
        nodes, _ = await client.list(NODES)
    return build_view(
        slices, classes, claims, namespaces, nodes, skip_claim_uid=skip_claim_uid, kube_minor=minor
    )


def pod_view(
    view: ClusterView, pod: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]]
) -> tuple[ClusterView, dict[str, str]]:
    """Pure: ``view`` over the nodes kube-scheduler's node filters let ``pod`` (not bound yet, a wire object) go
    to, and what keeps it off each of the others that publish devices (``gpudra.planning.podnodes``; ``nodes``:
    every node, wire objects): a claim of the pod is allocated only on a node the pod may go to."""
    return over_nodes(view, kept_off(pod, nodes))


def no_node_left(view: ClusterView, kept: Mapping[str, str]) -> bool:
    """Pure: ``kept`` (the nodes with devices a pod may not go to, as :func:`over_nodes` leaves them) is every node
    that publishes devices: no scheduler allocates the pod's claims while it is."""
    return bool(kept) and len(kept) >= len(view.allocator.snapshot.node_names())


def over_nodes(view: ClusterView, kept: Mapping[str, str]) -> tuple[ClusterView, dict[str, str]]:
    """Pure: ``view`` without the nodes in ``kept`` (node -> what keeps a pod off it), and those of them that
    publish devices."""
    with_devices = set(view.allocator.snapshot.node_names())
    off = {name: why for name, why in kept.items() if name in with_devices}
    if not off:
        return view, {}
    return replace(view, nodes=[n for n in view.nodes if n.name not in off]), off


def explain(view: ClusterView, claim: ResourceClaim) -> Outcome:
    """Where the claim would be allocated now, or why it cannot be (with per-device detail for the nodes most
    likely to come near: the node scan skips hopeless nodes without a search)."""
    claim = _namespaced(claim)
    outcome = view.allocator.find_node([claim], view.nodes)
    if isinstance(outcome, NodesFailure):
        outcome = examine(outcome, [claim], view.nodes, view.allocator, DETAIL_NODES)
    return outcome


def _namespaced(claim: ResourceClaim) -> ResourceClaim:
    if claim.metadata.namespace is not None:
        return claim
    return claim.model_copy(update={"metadata": claim.metadata.model_copy(update={"namespace": "default"})})


def repartition(plan: DemandPlan | None, claim: ResourceClaim, note: str = "") -> Repartition | None:
    """The MIG planner's answer for one claim, in the words of an explanation (None: not a MIG claim, or it
    fits on free MIG devices)."""
    if plan is None:
        return None
    key = claim_key(_namespaced(claim))
    gpus = plan.gpus_for(key)
    if gpus:
        return Repartition(
            node=plan.placed.get(key, gpus[0].node),
            profiles=tuple(sorted((plan.needs.get(key) or {}).items())),
            steps=tuple(f"GPU {g.gpu_index}: {g.describe()}" for g in gpus),
            note=note,
        )
    reason = plan.reason_for(key)
    return Repartition(impossible=reason) if reason else None


def explanation(
    view: ClusterView,
    claim: ResourceClaim,
    outcome: Failure | NodesFailure,
    plan: DemandPlan | None,
    note: str = "",
) -> Explanation:
    """What the controller's Event and ``gpudra explain`` say about a claim that does not fit."""
    return explain_outcome(
        outcome,
        snapshot=view.allocator.snapshot,
        holders=view.holders,
        classes=list(view.allocator.classes),
        repartition=repartition(plan, claim, note),
    )
