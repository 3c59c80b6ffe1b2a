"""The stand-in control plane: kube-controller-manager's resourceclaim controller (claims from templates,
reservedFor cleanup, deallocation of claims their last pod left) and kube-scheduler's DRA part (allocate a pending
pod's claims on one node with gpudra's allocator, write status.allocation and reservedFor, bind the pod), fed by one set
of watches (``state``) and one queue.

As in Kubernetes, three stages. The claims of new pods are made concurrently by a few workers (``ClaimController``);
pods with a priority (critical daemons) do not wait for one. One worker then schedules pods one at a time, in
memory, so allocations never race (``Scheduler``, the scheduling cycle); each scheduled pod's claim writes and
binding run in the background (the binding cycle). A pod that is gone or finished releases its claims
(``ClaimRelease``). The pods that could not go anywhere wait here until something changes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gpudra.allocator import DEFAULT_KUBE_MINOR
from gpudra.api.core import Pod
from gpudra.cluster.controlplane.claimcontroller import ClaimController
from gpudra.cluster.controlplane.claimrelease import ClaimRelease
from gpudra.cluster.controlplane.daemonsets import DaemonSets
from gpudra.cluster.controlplane.eviction import DeviceTaintEviction
from gpudra.cluster.controlplane.filtering import NodeFilter
from gpudra.cluster.controlplane.predicates import pod_priority
from gpudra.cluster.controlplane.scheduler import PodKey, Scheduler
from gpudra.cluster.controlplane.state import ClusterState
from gpudra.cluster.controlplane.workloads import Workloads
from gpudra.errors import GpudraError
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.resources import Resource
from gpudra.telemetry import get_logger

log = get_logger(__name__)
RETRY_SECONDS = 2.0
CLAIM_WORKERS = 8
"""Pods whose claims are made at once; pods with a priority (critical daemons) do not wait for a worker."""


class ControlPlane:
    def __init__(
        self,
        client: KubeClient,
        taint_rules: Resource | None = None,
        *,
        evict_extended: bool = True,
        kube_minor: int = DEFAULT_KUBE_MINOR,
    ) -> None:
        """``taint_rules``: DeviceTaintRule at the version the API server serves (default: v1);
        ``evict_extended``: a pod's extended-resource claim counts for eviction (Kubernetes 1.37+);
        ``kube_minor``: the Kubernetes minor whose kube-scheduler the stand-in allocates as."""
        self.client = client  # what every part reads and writes through
        self.state = ClusterState(
            client,
            on_pod=self._on_pod,
            on_claim=self._on_claim,
            on_template=self._on_template,
            taint_rules=taint_rules,
            kube_minor=kube_minor,
        )
        self._changed_seen = 0
        self._queue: asyncio.PriorityQueue[tuple[int, int, PodKey]] = asyncio.PriorityQueue()
        self._sequence = 0
        self._queued: set[PodKey] = set()
        self._claiming: dict[PodKey, asyncio.Task[None]] = {}  # pods whose claims are being made
        self._claim_workers = asyncio.Semaphore(CLAIM_WORKERS)
        self._unschedulable: set[PodKey] = set()
        events = EventRecorder(client, "gpudra-scheduler")
        self.filter = NodeFilter(self.state, events)
        self.claims = ClaimController(client, self.state, events)
        self.scheduler = Scheduler(
            client,
            self.state,
            self.filter,
            events,
            unschedulable=self._unschedulable.add,
            enqueue=self._enqueue,
        )
        self.release = ClaimRelease(client, self.state, freed=self._retry_unschedulable)
        self.workloads = Workloads(client, self.state.pods)
        self.daemonsets = DaemonSets(client, self.state.pods, self.state.nodes)
        self.eviction = DeviceTaintEviction(client, self.state, extended=evict_extended)
        self.state.listeners.append(self.eviction.poke)
        self.synced = asyncio.Event()

    # ------------------------------------------------------------------ events in

    def _enqueue(self, key: PodKey) -> None:
        """A pod to schedule: its claims are made first (concurrently with other pods'), then it is queued."""
        if key not in self._claiming and key not in self._queued:
            self._claiming[key] = asyncio.create_task(self._claims_then_queue(key), name=f"claims {key}")

    async def _claims_then_queue(self, key: PodKey) -> None:
        try:
            if pod_priority(self.state.pods.cache.get(key) or {}) > 0:
                ready = await self.make_claims(key)
            else:
                async with self._claim_workers:
                    ready = await self.make_claims(key)
        except GpudraError as exc:
            log.warning("making the pod's claims failed; will retry", pod="/".join(key), error=str(exc))
            self._unschedulable.add(key)
            return
        finally:
            self._claiming.pop(key, None)
        if ready:
            self._queue_for_scheduling(key)

    def _queue_for_scheduling(self, key: PodKey) -> None:
        """Queue a pod; higher priority first (kube-scheduler's order), then first come first served."""
        if key not in self._queued:
            self._queued.add(key)
            self._sequence += 1
            pod = self.state.pods.cache.get(key) or {}
            self._queue.put_nowait((-pod_priority(pod), self._sequence, key))

    async def _on_pod(self, kind: str, body: dict[str, Any]) -> None:
        self.filter.pod_event(kind, body, self.scheduler.dra_resources())
        self.workloads.pod_changed(body)
        meta = body["metadata"]
        if kind == "DELETED":
            self.scheduler.forget(meta["uid"])
            await self.release.release(meta["uid"])
            self._unschedulable.discard((meta.get("namespace", ""), meta["name"]))
            self._retry_unschedulable()
            return
        key = (meta.get("namespace", ""), meta["name"])
        phase = (body.get("status") or {}).get("phase")
        if body["spec"].get("nodeName") and phase not in ("Succeeded", "Failed"):
            if _bound_and_live(body) and _unrecorded_templates(body):
                self._enqueue(key)  # created bound to the node: its claims are made all the same
            return  # bound and running: nothing to do until it finishes or goes
        self._enqueue(key)

    async def _on_claim(self, kind: str, body: dict[str, Any]) -> None:
        """After the state recorded the claim's allocation: retry pods if devices came free. An allocated claim
        that nobody reserves keeps its allocation, as kube-controller-manager leaves it: only the last pod leaving
        its reservedFor deallocates it (``ClaimRelease.release``)."""
        if self.state.changed != self._changed_seen:
            self._changed_seen = self.state.changed
            self._retry_unschedulable()

    async def _on_template(self, kind: str, body: dict[str, Any]) -> None:
        """A template appeared (e.g. a ComputeDomain's): pods that waited for it make their claims now."""
        if kind == "ADDED":
            self._retry_unschedulable()

    def _retry_unschedulable(self) -> None:
        for key in sorted(self._unschedulable):
            self._enqueue(key)
        self._unschedulable.clear()

    # ------------------------------------------------------------------ loop

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(i.run(), name=f"informer {i.resource.plural}") for i in self.state.informers
        ]
        try:
            await asyncio.gather(*(i.synced.wait() for i in self.state.informers))
            # workloads start once the pod cache is complete, so they never create a pod twice
            workloads = [*self.workloads.informers, *self.daemonsets.informers]
            tasks += [asyncio.create_task(i.run(), name=f"informer {i.resource.plural}") for i in workloads]
            await asyncio.gather(*(i.synced.wait() for i in workloads))
            self.synced.set()
            retry = asyncio.create_task(self._periodic_retry())
            tasks += [retry, asyncio.create_task(self.eviction.run(), name="device taint eviction")]
            tasks.append(asyncio.create_task(self.workloads.run(), name="workload controllers"))
            while True:
                _, _, key = await self._queue.get()
                self._queued.discard(key)
                try:
                    await self.sync_pod(key)
                except GpudraError as exc:
                    log.warning("pod sync failed; will retry", pod="/".join(key), error=str(exc))
                    self._unschedulable.add(key)
        finally:
            tasks += [*self._claiming.values(), *self.scheduler.binding]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _periodic_retry(self) -> None:
        while True:
            await asyncio.sleep(RETRY_SECONDS)
            self._retry_unschedulable()

    # ------------------------------------------------------------------ one pod

    async def _pending(self, body: dict[str, Any] | None) -> Pod | None:
        """The pod still to schedule, or None (gone, bound, or finished: then its claims are released)."""
        if body is None:
            return None
        pod = Pod.model_validate(body)
        if pod.status and pod.status.phase in ("Succeeded", "Failed"):
            await self.release.release(pod.metadata.uid or "")
            return None
        if (
            pod.metadata.deletion_timestamp
            or pod.spec.node_name
            or self.scheduler.bound(pod.metadata.uid or "")
        ):
            return None  # bound already (the cache may lag behind our own binding)
        return pod

    async def make_claims(self, key: PodKey) -> bool:
        """The pod's claims from templates and its extended-resource claim exist and are recorded in its status;
        False when the pod is not to be scheduled (yet)."""
        body = self.state.pods.cache.get(key)
        if body is not None and _bound_and_live(body):
            if _unrecorded_templates(body) and not await self.claims.make_for_bound(
                Pod.model_validate(body), body
            ):
                self._unschedulable.add(key)  # a template is missing: retried when one appears
            return False
        pod = await self._pending(body)
        if pod is None or body is None:
            return False
        if not await self.claims.make(pod, body):
            self._unschedulable.add(key)  # a template is missing: retried when one appears
            return False
        return True

    async def sync_pod(self, key: PodKey) -> None:
        """The scheduling cycle of one pod whose claims were made."""
        body = self.state.pods.cache.get(key)
        pod = await self._pending(body)
        if pod is None or body is None or self.filter.gated(body):
            return
        names = self.claims.names(pod)
        if names is None:
            self._enqueue(key)  # a claim of the pod was deleted meanwhile: made again first
            return
        claims = [self.state.claims.cache.get((key[0], name)) for name in names]
        if any(c is None for c in claims):
            self._unschedulable.add(key)  # a named claim that does not exist yet
            return
        await self.scheduler.schedule(pod, body, [c for c in claims if c is not None])


def _bound_and_live(body: dict[str, Any]) -> bool:
    """Whether a pod is bound to a node, not finished and not being deleted."""
    phase = (body.get("status") or {}).get("phase")
    deleting = body["metadata"].get("deletionTimestamp")
    return bool(body["spec"].get("nodeName")) and phase not in ("Succeeded", "Failed") and not deleting


def _unrecorded_templates(body: dict[str, Any]) -> bool:
    """Whether a pod's status does not record the claim of one of its templates yet."""
    recorded = {s.get("name") for s in (body.get("status") or {}).get("resourceClaimStatuses") or []}
    return any(
        c.get("resourceClaimTemplateName") and c.get("name") not in recorded
        for c in body["spec"].get("resourceClaims") or []
    )
