"""The controller's real-cluster role for claims: a claim of this driver still unallocated after a grace period gets
an Event saying why (the allocator's explanation), deduplicated so one pending claim cannot flood the API, and the
pending claims are counted by reason code in metrics. For pending MIG claims the Event also says which MIG
repartition of idle GPUs would satisfy them (the planner, ``gpudra.mig.demand``), and with the apply policy the
controller writes that repartition as a planner MigLayout (``gpudra.controller.migplanner``). The claims kube-scheduler
would make for pods' extended resources (``gpudra.planning.podclaims``) are explained alongside, without an Event of
their own (no such object exists): ``gpudra.controller.pendingpods`` posts what is said of a pod's claims on the
pod."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from gpudra.allocator import (
    Allocation,
    Allocator,
    Failure,
    NodeInfo,
    NodesFailure,
    Repartition,
    claim_key,
    meant_class,
    spec_json,
)
from gpudra.api.dra import DeviceClass, ResourceClaim
from gpudra.api.meta import ObjectMeta
from gpudra.api.timestamps import epoch_seconds
from gpudra.config import MigPlannerPolicy
from gpudra.controller.explaining import (
    ClusterView,
    Outcome,
    explain,
    explanation,
    no_node_left,
    over_nodes,
    repartition,
)
from gpudra.controller.liveview import LiveView
from gpudra.controller.migplanner import apply_plan, step_aside
from gpudra.errors import GpudraError
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.metrics import Metrics
from gpudra.mig import (
    DemandPlan,
)
from gpudra.planning.boundclaims import BOUND_REASON
from gpudra.planning.migdemand import plan_pending
from gpudra.planning.podnodes import NO_NODE_REASON, NO_NODE_WORDS, kept_off_sentence
from gpudra.telemetry import get_logger

log = get_logger(__name__)

EVENT_LIMIT = 1024
EVENT_POSTS_AT_ONCE = 8
"""A round's Events are posted this many at a time (100 pending claims, one after the other, took a second)."""
SETTLED_LIMIT = 1024
"""How many claim shapes' settled answers are kept (all are dropped past it, and found again as needed)."""


@dataclass(frozen=True)
class Said:
    """What the claim's Event says: the reason code and the message."""

    reason: str
    text: str


def uses_driver(claim: ResourceClaim, classes: Mapping[str, DeviceClass], driver: str) -> bool:
    """Pure: does any request of the claim name a DeviceClass whose selectors mention ``driver``? A class that
    does not exist counts as the one it most likely misspells (then the claim is ours to explain: "did you mean
    gpu.nvidia.com?"; kube-scheduler says only that the class does not exist)."""
    return _classes_use_driver(_class_names(claim), classes, driver)


def _class_names(claim: ResourceClaim) -> frozenset[str]:
    names: set[str] = set()
    for request in claim.spec.devices.requests or []:
        if request.exactly is not None:
            names.add(request.exactly.device_class_name)
        names.update(sub.device_class_name for sub in request.first_available or [])
    return frozenset(names)


def _classes_use_driver(names: frozenset[str], classes: Mapping[str, DeviceClass], driver: str) -> bool:
    for name in names:
        meant = name if name in classes else meant_class(name, classes)
        device_class = classes.get(meant) if meant is not None else None
        selectors = (device_class.spec.selectors or []) if device_class is not None else []
        if any(s.cel is not None and driver in s.cel.expression for s in selectors):
            return True
    return False


class _DriverCheck:
    """``uses_driver`` over one round's classes, answered once per claim spec (the pending claims of a fleet are
    of a few shapes, their specs' JSON kept with them, and every one was checked at every round) and once per set
    of class names."""

    def __init__(self, classes: Mapping[str, DeviceClass], driver: str) -> None:
        self._classes = classes
        self._driver = driver
        self._by_spec: dict[str, bool] = {}
        self._known: dict[frozenset[str], bool] = {}

    def __call__(self, claim: ResourceClaim) -> bool:
        spec = spec_json(claim)
        known = self._by_spec.get(spec)
        if known is None:
            names = _class_names(claim)
            known = self._known.get(names)
            if known is None:
                known = self._known[names] = _classes_use_driver(names, self._classes, self._driver)
            self._by_spec[spec] = known
        return known


@dataclass
class _Settled:
    """An answer that holds whatever is allocated (``NodesFailure.settled``: no device anywhere passes a request's
    selectors), and what was said of it, for as long as the cluster it was found in has the same allocator (the
    DeviceClasses), slices, nodes and labels of the claims' namespace. A claim nothing can match is the commonest
    pending claim there is (a misspelt model, a class no node serves); it was explained anew every round, about 5
    ms at 1,000 nodes with its wording."""

    allocator: Allocator
    version: int
    nodes: list[NodeInfo]
    labels: Mapping[str, str] | None
    outcome: NodesFailure
    said: dict[Repartition | None, Said] = field(default_factory=dict)

    def holds(self, view: ClusterView, labels: Mapping[str, str] | None) -> bool:
        return (
            self.allocator is view.allocator
            and self.version == view.allocator.snapshot.version
            and self.nodes is view.nodes
            and self.labels == labels
        )


_Kept = tuple[tuple[str, str], ...]
"""The nodes with devices a claim's pod may not go to, with why, sorted (empty: it may go to any)."""


@dataclass(frozen=True)
class _PodNodes:
    """The view a claim is explained over: every node, or the nodes its waiting pod may go to (``kept``: those
    with devices it may not, and why)."""

    view: ClusterView
    kept: _Kept = ()

    @classmethod
    def of(cls, view: ClusterView, kept_off: Mapping[str, str] | None) -> _PodNodes:
        if not kept_off:
            return cls(view)
        seen, kept = over_nodes(view, kept_off)
        return cls(seen, tuple(sorted(kept.items())))

    def nowhere(self) -> bool:
        """The pod may go to no node with devices: no scheduler allocates its claim while it may not."""
        return no_node_left(self.view, dict(self.kept))

    def explain(self, claim: ResourceClaim) -> Outcome | None:
        """The allocator's answer over these nodes; None when there are none."""
        return None if self.nowhere() else explain(self.view, claim)

    def said(
        self, claim: ResourceClaim, outcome: Failure | NodesFailure | None, plan: DemandPlan | None, note: str
    ) -> Said:
        """The claim's Event: its explanation, after which nodes its pod may not go to; the node filters' alone
        when there is no node left (``outcome`` None)."""
        devices_on = len(self.view.allocator.snapshot.node_names())
        off = kept_off_sentence(dict(self.kept), devices_on) if self.kept else ""
        if outcome is None:
            return Said(NO_NODE_REASON, f"{NO_NODE_WORDS}. {off}")  # the Event keeps its first 1,024
        explained = explanation(self.view, claim, outcome, plan, note)
        if off:
            explained = replace(explained, sentences=(off, *explained.sentences))
        return Said(explained.reason, explained.text(EVENT_LIMIT))


def age_seconds(meta: ObjectMeta, now: float) -> float:
    created = meta.creation_timestamp
    if not created:
        return 0.0
    return max(0.0, now - epoch_seconds(created))


class PendingClaims:
    def __init__(
        self,
        client: KubeClient,
        metrics: Metrics,
        *,
        driver: str,
        mig_planner: MigPlannerPolicy = "suggest",
    ) -> None:
        self._client = client
        self._metrics = metrics
        self._driver = driver
        self._planner = mig_planner
        self._minor_known = False
        self.live = LiveView()
        """The cluster the explanations look at: the claims are handed in by :meth:`claim_changed`, the rest by
        the controller's informers."""
        self._events = EventRecorder(client, "gpudra-controller", series=True)
        self.reasons: dict[str, str] = {}  # claim uid -> reason code while pending
        self.said: dict[str, Said] = {}  # claim uid -> its latest explanation while it cannot fit
        self.unallocated: dict[str, ResourceClaim] = {}
        """The claims without an allocation, by uid, as of their latest change (``claim_changed``)."""
        self._settled: dict[tuple[str, str], _Settled] = {}
        self.told_listeners: list[Callable[[], None]] = []
        """Called when :meth:`tell` says something new of a claim (the web view draws those from
        :meth:`stranded`)."""

    async def _cluster(self) -> ClusterView:
        if not self._minor_known:  # the allocator follows the API server's Kubernetes version
            _, self.live.kube_minor = await self._client.server_version()
            self._minor_known = True
        return self.live.view(list(self.unallocated.values()))

    async def check_all(
        self,
        claims: list[ResourceClaim],
        classes: Mapping[str, DeviceClass],
        implicit: Sequence[ResourceClaim] = (),
        *,
        planned: Sequence[ResourceClaim] = (),
        kept_off: Mapping[str, Mapping[str, str]] | None = None,
    ) -> dict[str, Said]:
        """Explain the pending claims, with the ``implicit`` claims kube-scheduler would make for pods' extended
        resources (each with a uid of its own); return what is said of each claim that does not fit now, by uid.
        The MIG planner serves them jointly, oldest first, with the other pending claims in ``planned`` (those
        explained in an earlier round: a plan for some of them alone could differ). ``kept_off``: claim uid ->
        the nodes its waiting pod may not go to and why (kube-scheduler's node filters): the claim is explained
        over the other nodes, and its words name those."""
        ours_to_explain = _DriverCheck(classes, self._driver)
        ours: list[ResourceClaim] = []
        for claim in claims:
            if claim.allocation is not None or not ours_to_explain(claim):
                self.forget(_uid(claim))
            else:
                ours.append(claim)
        imagined = [c for c in implicit if ours_to_explain(c)]
        if not ours and not imagined and self._planner != "apply":
            return {}
        view = await self._cluster()
        if self._planner == "apply":
            try:
                await step_aside(self._client, view.nodes)
            except GpudraError as exc:
                log.warning("checking planner MigLayouts failed", error=str(exc))
        ours += imagined
        failed: list[tuple[ResourceClaim, _PodNodes, Failure | NodesFailure | None]] = []
        outcomes: dict[tuple[tuple[str, str], _Kept], Allocation | Failure | NodesFailure | None] = {}
        seen: dict[int, _PodNodes] = {}  # pods alike share one answer of the node filters: one view for them
        for claim in ours:  # claims of one shape (one template's) whose pods go to the same nodes: one answer
            off = (kept_off or {}).get(_uid(claim))
            nodes = seen.get(id(off))
            if nodes is None:
                nodes = seen[id(off)] = _PodNodes.of(view, off)
            shape = _shape(claim)
            key = (shape, nodes.kept)
            if key not in outcomes:
                outcomes[key] = nodes.explain(claim) if nodes.kept else self._explain(view, shape, claim)
            outcome = outcomes[key]
            if isinstance(outcome, Allocation):
                self.forget(_uid(claim))  # it fits now; the scheduler will get to it
            else:
                failed.append((claim, nodes, outcome))
        plan: DemandPlan | None = None
        notes: dict[str, str] = {}
        if failed and self._planner != "off":
            try:
                asked = {_uid(c) for c in ours}
                others = [
                    c for c in planned if _uid(c) not in asked and c.allocation is None and ours_to_explain(c)
                ]
                kept = {
                    claim_key(c): [node for node, _ in nodes.kept] for c, nodes, _ in failed if nodes.kept
                }
                plan, notes = await self._suggest(view, ours + others, kept)
            except GpudraError as exc:  # the explanations still go out
                log.warning("the MIG planner failed", error=str(exc))
        said: dict[str, Said] = {}
        no_object = {id(c) for c in imagined}
        words: dict[tuple[tuple[str, str], _Kept, Repartition | None], Said] = {}
        posts: list[Coroutine[Any, Any, bool]] = []
        for claim, nodes, outcome in failed:
            uid = _uid(claim)
            note = (notes.get(plan.placed.get(claim_key(claim), "")) if plan is not None else None) or ""
            worded = (_shape(claim), nodes.kept, repartition(plan, claim, note))
            known = words.get(worded)
            if known is None:
                settled = None if nodes.kept else self._settled.get(worded[0])
                known = settled.said.get(worded[2]) if settled is not None else None
                if known is None:
                    known = nodes.said(claim, outcome, plan, note)
                    if settled is not None:
                        settled.said[worded[2]] = known
                words[worded] = known
            said[uid] = self._record(uid, known)
            if id(claim) not in no_object:
                posts.append(self._events.post(claim, "Warning", known.reason, known.text))
        await at_most(EVENT_POSTS_AT_ONCE, posts)
        self._refresh_gauge()
        return said

    def ours(self, classes: Mapping[str, DeviceClass]) -> Callable[[ResourceClaim], bool]:
        """Whether a claim is this driver's to explain, with these DeviceClasses."""
        return _DriverCheck(classes, self._driver)

    async def tell(self, told: Sequence[tuple[ResourceClaim, Said]]) -> None:
        """Say of each claim what is known of it without the allocator (a claim no scheduler will allocate), as
        :meth:`check_all` says its explanations: the claim's Event, its reason in the metrics."""
        changed = any(self.said.get(_uid(c)) != k for c, k in told)
        for claim, known in told:
            self._record(_uid(claim), known)
        if changed:
            for listener in self.told_listeners:
                listener()
        await at_most(
            EVENT_POSTS_AT_ONCE, [self._events.post(c, "Warning", k.reason, k.text) for c, k in told]
        )
        if told:
            self._refresh_gauge()

    def stranded(self, uid: str) -> Said | None:
        """What was said of the claim when no scheduler will allocate it (``gpudra.planning.boundclaims``), else
        None."""
        said = self.said.get(uid)
        return said if said is not None and said.reason == BOUND_REASON else None

    def _record(self, uid: str, known: Said) -> Said:
        if self.reasons.get(uid) != known.reason:
            self._metrics.allocation_failures.labels(known.reason).inc()
        self.reasons[uid] = known.reason
        self.said[uid] = known
        return known

    def _explain(self, view: ClusterView, shape: tuple[str, str], claim: ResourceClaim) -> Outcome:
        """The allocator's answer for claims of this shape: a settled one while it holds, else found again."""
        labels = view.allocator.namespace_labels.get(shape[0])
        settled = self._settled.get(shape)
        if settled is not None and settled.holds(view, labels):
            return settled.outcome
        self._settled.pop(shape, None)
        outcome = explain(view, claim)
        if isinstance(outcome, NodesFailure) and outcome.settled:
            if len(self._settled) >= SETTLED_LIMIT:
                self._settled.clear()
            snapshot = view.allocator.snapshot
            self._settled[shape] = _Settled(view.allocator, snapshot.version, view.nodes, labels, outcome)
        return outcome

    async def _suggest(
        self, view: ClusterView, claims: list[ResourceClaim], kept_off: Mapping[str, list[str]]
    ) -> tuple[DemandPlan, dict[str, str]]:
        """The MIG planner's plan for the pending claims (none placed on a node its pod may not go to: ``kept_off``,
        by claim key) and, when the policy applies it, a note per node."""
        plan = plan_pending(view.allocator, claims, self._driver, view.mig_models, kept_off)
        notes: dict[str, str] = {}
        if self._planner == "apply" and any(n.gpus for n in plan.nodes):
            notes = await apply_plan(self._client, plan, view.nodes, view.mig_models.pci_device_ids())
        return plan, notes

    def claim_changed(self, uid: str, claim: ResourceClaim | None) -> None:
        """A claim changed (None: deleted, or it does not parse): keep the unallocated ones, and time those that
        got their allocation after being pending."""
        self.live.claim_changed(uid, claim)
        if claim is not None and claim.allocation is None:
            self.unallocated[uid] = claim
            return
        self.unallocated.pop(uid, None)
        if claim is None:
            self.forget(uid)
        else:
            self.allocated(claim.metadata)

    def allocated(self, meta: ObjectMeta) -> None:
        """A claim we saw pending got its allocation: record how long it waited."""
        uid = meta.uid or ""
        if uid in self.reasons:
            self._metrics.claim_pending_seconds.observe(age_seconds(meta, time.time()))
        self.forget(uid)

    def forget(self, uid: str) -> None:
        self.said.pop(uid, None)
        if self.reasons.pop(uid, None) is not None:
            self._refresh_gauge()

    def _refresh_gauge(self) -> None:
        counts: dict[str, int] = {}
        for reason in self.reasons.values():
            counts[reason] = counts.get(reason, 0) + 1
        for reason in self._metrics.known_pending_reasons | set(counts):
            self._metrics.pending_claims.labels(reason).set(counts.get(reason, 0))
        self._metrics.known_pending_reasons |= set(counts)


def _uid(claim: ResourceClaim) -> str:
    return claim.metadata.uid or ""


def _shape(claim: ResourceClaim) -> tuple[str, str]:
    """What the allocator's answer for a claim depends on besides the cluster: its namespace and its spec."""
    return claim.metadata.namespace or "default", spec_json(claim)


_T = TypeVar("_T")


async def at_most(limit: int, calls: Sequence[Coroutine[Any, Any, _T]]) -> list[_T]:
    """Await the calls, ``limit`` at a time; their results in the calls' order."""
    gate = asyncio.Semaphore(limit)

    async def one(call: Coroutine[Any, Any, _T]) -> _T:
        async with gate:
            return await call

    return list(await asyncio.gather(*(one(c) for c in calls)))
