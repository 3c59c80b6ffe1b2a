"""The stand-in kube-scheduler's decision and binding for one pod whose claims exist.

The scheduling cycle (:meth:`Scheduler.schedule`, one pod at a time, in memory): kube-scheduler's node filters, then
gpudra's allocator over the pod's unallocated claims on the nodes left, or a FailedScheduling Event that words the
nearest miss. The binding cycle (in the background): each claim's allocation and reservedFor written, then the pod
bound; its allocations are assumed meanwhile so that stale events of its claims cannot free the devices again, and a
pod sharing a claim whose write is in flight waits for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from gpudra.allocator import (
    FILTER_PREFIX,
    Allocation,
    Allocator,
    Failure,
    NodeInfo,
    NodesFailure,
    examine,
    explain_outcome,
)
from gpudra.api.core import Pod
from gpudra.api.dra import AllocationResult, ResourceClaim, ResourceClaimConsumerReference
from gpudra.api.timestamps import rfc3339
from gpudra.cluster.apiserver.podadmission import SYSTEM_PRIORITY_CLASSES
from gpudra.cluster.controlplane.extended import class_for_resource
from gpudra.cluster.controlplane.filtering import NodeFilter
from gpudra.cluster.controlplane.state import ClusterState
from gpudra.errors import ConflictError, GpudraError
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.resources import PODS, RESOURCE_CLAIMS
from gpudra.telemetry import get_logger

log = get_logger(__name__)
UNSCHEDULABLE = "Unschedulable"
"""The reason of the ``PodScheduled`` condition kube-scheduler writes on a pod it could not place."""
NOTE_LIMIT = 1024
"""An Event's longest note; kube-scheduler cuts a longer FailedScheduling message to it, ending " ..."."""

PodKey = tuple[str, str]  # (namespace, name)
Write = tuple[
    dict[str, Any], dict[str, Any] | None
]  # a claim and the allocation to write into it (None: kept)


class Scheduler:
    """``unschedulable(key)`` hands a pod back to be tried again when something changes; ``enqueue(key)`` queues a
    pod that waited for a binding in flight."""

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        node_filter: NodeFilter,
        events: EventRecorder,
        *,
        unschedulable: Callable[[PodKey], None],
        enqueue: Callable[[PodKey], None],
    ) -> None:
        self._client = client
        self._state = state
        self._filter = node_filter
        self._events = events
        self._unschedulable = unschedulable
        self._enqueue = enqueue
        self._bound: dict[str, str] = {}  # uid -> node of the pods this scheduler bound
        self.binding: set[asyncio.Task[None]] = set()  # binding cycles in flight
        self._deferred: set[PodKey] = set()  # pods whose claim a binding in flight writes
        self._explained: dict[int, tuple[NodesFailure, str]] = {}  # remembered failures, worded

    def bound(self, pod_uid: str) -> bool:
        """Whether this scheduler bound the pod (the pod cache may lag behind)."""
        return pod_uid in self._bound

    def forget(self, pod_uid: str) -> None:
        self._bound.pop(pod_uid, None)

    def dra_resources(self) -> set[str]:
        """Extended resources that DRA serves (not node allocatable): left out of NodeResourcesFit."""
        return set(class_for_resource(list(self._state.classes.cache.values())))

    async def schedule(self, pod: Pod, body: dict[str, Any], claims: list[dict[str, Any]]) -> None:
        """Pick the pod's node and allocate its claims there, then start the binding cycle; or tell why not."""
        key = (pod.metadata.namespace or "", pod.metadata.name or "")
        if any(self._state.writing(c["metadata"]["uid"]) for c in claims):
            # a claim shared with a pod being bound: scheduled when that write is done
            self._deferred.add(key)
            return
        typed = [ResourceClaim.model_validate(c) for c in claims]
        await self._filter.tell_unsupported(body, SYSTEM_PRIORITY_CLASSES)
        nodes = self._state.node_infos()
        for model in typed:
            node = model.allocation.node if model.allocation is not None else None
            if node is not None:
                nodes = [n for n in nodes if n.name == node]
        verdict = self._filter.feasible(body, nodes, self.dra_resources())
        if not verdict.nodes:
            self._unschedulable(key)
            message = (
                verdict.message()
                if nodes
                else "0 nodes are available: the pod's claims are allocated on different nodes"
            )
            await self._failed(body, message)
            return
        nodes = verdict.nodes
        node_name = self._least_loaded(nodes) if not claims else nodes[0].name
        pending = [
            (c, m) for c, m in zip(claims, typed, strict=True) if not (m.status and m.status.allocation)
        ]
        results: dict[str, AllocationResult] = {}
        if pending:
            allocator = self._state.allocator()
            models = [m for _, m in pending]
            outcome = allocator.find_node(models, nodes)
            if not isinstance(outcome, Allocation):
                self._unschedulable(key)
                message = self._why(allocator, models, nodes, outcome)
                await self._failed(body, message)
                for claim, _ in pending:
                    await self._events.post(claim, "Warning", "FailedAllocation", message)
                return
            node_name = outcome.node
            results = {c.key: c.result for c in outcome.claims}
        writes: list[Write] = []
        for claim, model in zip(claims, typed, strict=True):
            result = results.get(f"{model.metadata.namespace}/{model.metadata.name}")
            if result is not None:
                result = result.model_copy(update={"allocation_timestamp": rfc3339()})
                self._state.assume(model.metadata.uid or "", result)
            writes.append((claim, result.to_wire() if result is not None else None))
        self._bound[pod.metadata.uid or ""] = node_name
        self._filter.assume(body, node_name, self.dra_resources())
        task = asyncio.create_task(self._bind(key, pod, writes, node_name), name=f"bind {key}")
        self.binding.add(task)
        task.add_done_callback(self.binding.discard)

    async def _failed(self, body: dict[str, Any], message: str) -> None:
        """The FailedScheduling Warning, and as kube-scheduler the pod's ``PodScheduled`` condition False with
        reason ``Unschedulable`` and the same message (written when it changes)."""
        await self._events.post(body, "Warning", "FailedScheduling", message)
        meta, status = body["metadata"], body.get("status") or {}
        conditions = list(status.get("conditions") or [])
        old = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if old is not None and (old.get("status"), old.get("reason"), old.get("message")) == (
            "False",
            UNSCHEDULABLE,
            message,
        ):
            return
        condition: dict[str, Any] = {"type": "PodScheduled", "status": "False", "lastProbeTime": None}
        if meta.get("generation"):
            condition["observedGeneration"] = meta["generation"]
        since = old.get("lastTransitionTime") if old is not None and old.get("status") == "False" else None
        condition.update(lastTransitionTime=since or rfc3339(), reason=UNSCHEDULABLE, message=message)
        kept = [c for c in conditions if c.get("type") != "PodScheduled"]
        try:
            await self._client.patch(
                PODS, meta["name"], {"status": {"conditions": [*kept, condition]}}, meta["namespace"],
                subresource="status",
            )  # fmt: skip
        except GpudraError as exc:  # the pod went, or the server did not answer: written at the next try
            log.info("writing a pod's PodScheduled condition failed", pod=meta["name"], error=str(exc))

    def _why(
        self,
        allocator: Allocator,
        claims: list[ResourceClaim],
        nodes: list[NodeInfo],
        outcome: Failure | NodesFailure,
    ) -> str:
        """FailedScheduling's message: an error of Kubernetes' allocator as kube-scheduler words it (the attempt
        is aborted), else the nearest miss first, as the controller's Event words it. The allocator answers again
        with the same failure object while nothing was freed nor republished: worded once."""
        if isinstance(outcome, Failure) and outcome.aborts:
            return _note(FILTER_PREFIX + outcome.aborts)
        remembered = self._explained.get(id(outcome))
        if remembered is not None and remembered[0] is outcome:
            return remembered[1]
        examined = (
            examine(outcome, claims, nodes, allocator) if isinstance(outcome, NodesFailure) else outcome
        )
        said = explain_outcome(
            examined,
            snapshot=allocator.snapshot,
            holders=self._state.holders(),
            classes=list(allocator.classes),
        )
        text = said.text()
        if isinstance(outcome, NodesFailure):
            if len(self._explained) > 256:
                self._explained.clear()
            self._explained[id(outcome)] = (outcome, text)
        return text

    def _least_loaded(self, nodes: list[NodeInfo]) -> str:
        """For pods without claims: spread them over the nodes by the number of pods there (this scheduler's
        latest bindings included, before the cache shows them)."""
        return min(nodes, key=lambda n: (self._filter.load(n.name), n.name)).name

    async def _bind(self, key: PodKey, pod: Pod, writes: list[Write], node_name: str) -> None:
        """The binding cycle: every claim's allocation and reservation written, then the pod bound to the node.
        On failure the assumed allocations are dropped and the pod is scheduled again."""
        name, uid = pod.metadata.name or "", pod.metadata.uid or ""
        try:
            await asyncio.gather(*(self._reserve(claim, pod, allocation) for claim, allocation in writes))
            await self._client.create_subresource(
                PODS, name, "binding",
                {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                 "target": {"apiVersion": "v1", "kind": "Node", "name": node_name}},
                pod.metadata.namespace,
            )  # fmt: skip
        except GpudraError as exc:
            log.warning("binding the pod failed; will retry", pod="/".join(key), error=str(exc))
            self._bound.pop(uid, None)
            self._filter.forget(uid)
            for claim, allocation in writes:
                if allocation is not None:
                    claim_key = (claim["metadata"]["namespace"], claim["metadata"]["name"])
                    self._state.unassume(claim["metadata"]["uid"], self._state.claims.cache.get(claim_key))
            self._unschedulable(key)
            return
        finally:
            deferred, self._deferred = self._deferred, set()
            for waiting in sorted(deferred):
                self._enqueue(waiting)
        log.info(
            "pod bound", pod="/".join(key), node=node_name, claims=[c["metadata"]["name"] for c, _ in writes]
        )
        await self._events.post(
            pod, "Normal", "Scheduled", f"Successfully assigned {key[0]}/{key[1]} to {node_name}"
        )

    async def _reserve(self, claim: dict[str, Any], pod: Pod, allocation: dict[str, Any] | None) -> None:
        """Write allocation (when new) and add the pod to reservedFor, retrying on conflicts with a fresh read."""
        meta = claim["metadata"]
        consumer = ResourceClaimConsumerReference(
            resource="pods", name=pod.metadata.name or "", uid=pod.metadata.uid or ""
        )
        for _ in range(5):
            status = dict(claim.get("status") or {})
            if allocation is not None:
                status["allocation"] = allocation
            reserved = list(status.get("reservedFor") or [])
            if all(r.get("uid") != consumer.uid for r in reserved):
                reserved.append(consumer.to_wire())
            status["reservedFor"] = reserved
            try:
                updated = await self._client.replace(
                    RESOURCE_CLAIMS, {**claim, "status": status}, subresource="status"
                )
                self._state.remember_claim(updated)
                self._state.written(meta["uid"], updated)
                return
            except ConflictError:
                claim = await self._client.get_raw(RESOURCE_CLAIMS, meta["name"], meta["namespace"])
        raise ConflictError(f"resourceclaim {meta['namespace']}/{meta['name']}: too many write conflicts")


def _note(message: str) -> str:
    """kube-scheduler's truncateMessage."""
    return message if len(message) <= NOTE_LIMIT else message[: NOTE_LIMIT - 4] + " ..."
