"""Why a claim is (or would be) pending: the allocator run over what the cluster publishes right now.

Shared by ``gpudra explain`` and the controller's pending-claim Events, so both say the same: it reads slices,
classes, claims, namespaces and nodes through the client layer, builds the allocator's snapshot with every existing
allocation marked (and which claim holds each device), asks the allocator where the claim would fit, and words the
answer with the MIG planner's (``gpudra.allocator.wording``). Nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpudra.allocator.engine import Allocator
from gpudra.allocator.explain import Failure, NodesFailure
from gpudra.allocator.explanation import Explanation, Repartition
from gpudra.allocator.nearest import examine
from gpudra.allocator.pools import DeviceId, NodeInfo
from gpudra.allocator.requests import claim_key
from gpudra.allocator.result import Allocation
from gpudra.allocator.snapshot import ClusterSnapshot
from gpudra.allocator.wording import explain_outcome
from gpudra.api.dra import AllocationResult, DeviceClass, ResourceClaim, ResourceSlice
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import DEVICE_CLASSES, NAMESPACES, NODES, RESOURCE_CLAIMS, RESOURCE_SLICES
from gpudra.mig.demand import DemandPlan

Outcome = Allocation | Failure | NodesFailure
DETAIL_NODES = 16


@dataclass
class ClusterView:
    allocator: Allocator
    nodes: list[NodeInfo]
    pending: list[dict[str, Any]] = field(default_factory=list)  # unallocated claims
    holders: dict[DeviceId, str] = field(
        default_factory=dict
    )  # allocated device -> namespace/name of its claim


def build_view(
    slices: list[dict[str, Any]],
    classes: list[dict[str, Any]],
    claims: list[dict[str, Any]],
    namespaces: list[dict[str, Any]],
    nodes: list[dict[str, Any]],
    *,
    skip_claim_uid: str | None = None,
) -> ClusterView:
    """Pure: the allocator over these objects, with every allocation but ``skip_claim_uid``'s marked in use."""
    snapshot = ClusterSnapshot(ResourceSlice.model_validate(s) for s in slices)
    holders: dict[DeviceId, str] = {}
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation")
        if allocation and claim["metadata"].get("uid") != skip_claim_uid:
            result = AllocationResult.model_validate(allocation)
            snapshot.mark_allocated(result)
            key = f"{claim['metadata'].get('namespace', 'default')}/{claim['metadata'].get('name', '?')}"
            for r in (result.devices.results or []) if result.devices else []:
                holders[DeviceId(r.driver, r.pool, r.device)] = key
    labels = {ns["metadata"]["name"]: ns["metadata"].get("labels") or {} for ns in namespaces}
    allocator = Allocator(snapshot, [DeviceClass.model_validate(c) for c in classes], namespace_labels=labels)
    infos = [
        NodeInfo(n["metadata"]["name"], n["metadata"].get("labels") or {})
        for n in sorted(nodes, key=lambda n: n["metadata"]["name"])
    ]
    pending = [c for c in claims if not (c.get("status") or {}).get("allocation")]
    return ClusterView(allocator, infos, pending, holders)


async def load_view(client: KubeClient, *, skip_claim_uid: str | None = None) -> ClusterView:
    slices, _ = await client.list(RESOURCE_SLICES)
    classes, _ = await client.list(DEVICE_CLASSES)
    claims, _ = await client.list(RESOURCE_CLAIMS)
    namespaces, _ = await client.list(NAMESPACES)
    nodes, _ = await client.list(NODES)
    return build_view(slices, classes, claims, namespaces, nodes, skip_claim_uid=skip_claim_uid)


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
