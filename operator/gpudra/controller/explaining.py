"""Why a claim is (or would be) pending: the allocator run over what the cluster publishes right now.

Shared by ``gpudra explain`` and the controller's pending-claim Events. It reads slices, classes, claims, namespaces
and nodes through the client layer, builds the allocator's snapshot with every existing allocation marked, and asks
the allocator where the claim would fit. Nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpudra.allocator.engine import Allocator
from gpudra.allocator.explain import Failure, NodesFailure
from gpudra.allocator.pools import NodeInfo
from gpudra.allocator.result import Allocation
from gpudra.allocator.snapshot import ClusterSnapshot
from gpudra.api.resource import AllocationResult, DeviceClass, ResourceClaim, ResourceSlice
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import DEVICE_CLASSES, NAMESPACES, NODES, RESOURCE_CLAIMS, RESOURCE_SLICES

Outcome = Allocation | Failure | NodesFailure
DETAIL_NODES = 16


@dataclass
class ClusterView:
    allocator: Allocator
    nodes: list[NodeInfo]
    pending: list[dict[str, Any]] = field(default_factory=list)  # unallocated claims


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
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation")
        if allocation and claim["metadata"].get("uid") != skip_claim_uid:
            snapshot.mark_allocated(AllocationResult.model_validate(allocation))
    labels = {ns["metadata"]["name"]: ns["metadata"].get("labels") or {} for ns in namespaces}
    allocator = Allocator(snapshot, [DeviceClass.model_validate(c) for c in classes], namespace_labels=labels)
    infos = [
        NodeInfo(n["metadata"]["name"], n["metadata"].get("labels") or {})
        for n in sorted(nodes, key=lambda n: n["metadata"]["name"])
    ]
    pending = [c for c in claims if not (c.get("status") or {}).get("allocation")]
    return ClusterView(allocator, infos, pending)


async def load_view(client: KubeClient, *, skip_claim_uid: str | None = None) -> ClusterView:
    slices, _ = await client.list(RESOURCE_SLICES)
    classes, _ = await client.list(DEVICE_CLASSES)
    claims, _ = await client.list(RESOURCE_CLAIMS)
    namespaces, _ = await client.list(NAMESPACES)
    nodes, _ = await client.list(NODES)
    return build_view(slices, classes, claims, namespaces, nodes, skip_claim_uid=skip_claim_uid)


def explain(view: ClusterView, claim: ResourceClaim) -> Outcome:
    """Where the claim would be allocated now, or why it cannot be."""
    if claim.metadata.namespace is None:
        claim = claim.model_copy(
            update={"metadata": claim.metadata.model_copy(update={"namespace": "default"})}
        )
    outcome = view.allocator.find_node([claim], view.nodes)
    if isinstance(outcome, NodesFailure):
        # The node scan skips hopeless nodes without a search; re-run a few of them in detail for the numbers.
        detailed = {f.node: f for f in outcome.failures}
        for node in view.nodes[:DETAIL_NODES]:
            if not (detailed.get(node.name) and detailed[node.name].requests):
                again = view.allocator.allocate(node, [claim])
                if isinstance(again, Failure):
                    detailed[node.name] = again
        outcome.failures = [detailed.get(f.node, f) for f in outcome.failures]
    return outcome
