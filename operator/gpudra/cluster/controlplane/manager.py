"""The stand-in control plane: kube-controller-manager's resourceclaim controller (claims from templates,
reservedFor cleanup, deallocation of unused claims) and kube-scheduler's DRA part (allocate a pending pod's claims
on one node with gpudra's allocator, write status.allocation and reservedFor, bind the pod).

As in Kubernetes, three stages. The claims of new pods are made concurrently by a few workers (the resourceclaim
controller's part); pods with a priority (critical daemons) do not wait for one. One worker then schedules pods
one at a time, in memory, so allocations never race (the scheduling cycle). Each scheduled pod's claim writes
and binding run in the background (the binding cycle), its allocations assumed meanwhile so that stale events
of its claims cannot free the devices again; a pod sharing a claim whose write is in flight waits for it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gpudra.allocator.engine import Allocator
from gpudra.allocator.explain import Failure, NodesFailure
from gpudra.allocator.nearest import examine
from gpudra.allocator.pools import NodeInfo
from gpudra.allocator.result import Allocation
from gpudra.allocator.wording import explain_outcome
from gpudra.api.core import Pod
from gpudra.api.dra import ResourceClaim, ResourceClaimTemplate, allocated_node
from gpudra.api.timestamps import rfc3339
from gpudra.cluster.controlplane.claims import claim_from_template, is_generated_for, pod_claim_names
from gpudra.cluster.controlplane.daemonsets import DaemonSets
from gpudra.cluster.controlplane.eviction import DeviceTaintEviction
from gpudra.cluster.controlplane.extended import (
    EXTENDED_CLAIM_ANNOTATION,
    ExtendedRequest,
    class_for_resource,
    extended_claim,
    extended_requests,
    extended_status,
)
from gpudra.cluster.controlplane.filtering import NodeFilter
from gpudra.cluster.controlplane.predicates import SYSTEM_PRIORITIES, pod_priority
from gpudra.cluster.controlplane.state import ClusterState
from gpudra.cluster.controlplane.workloads import Workloads
from gpudra.errors import ConflictError, GpudraError, NotFoundError
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.resources import PODS, RESOURCE_CLAIMS
from gpudra.telemetry import get_logger

log = get_logger(__name__)
RETRY_SECONDS = 2.0
CLAIM_WORKERS = 8
"""Pods whose claims are made at once; pods with a priority (critical daemons) do not wait for a worker."""


def _now() -> str:
    return rfc3339()


def _consumer(pod: dict[str, Any]) -> dict[str, str]:
    return {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}


class ControlPlane:
    def __init__(self, client: KubeClient) -> None:
        self._client = client
        self.state = ClusterState(
            client, on_pod=self._on_pod, on_claim=self._on_claim, on_template=self._on_template
        )
        self._changed_seen = 0
        self._queue: asyncio.PriorityQueue[tuple[int, int, tuple[str, str]]] = asyncio.PriorityQueue()
        self._sequence = 0
        self._queued: set[tuple[str, str]] = set()
        self._claiming: dict[tuple[str, str], asyncio.Task[None]] = {}  # pods whose claims are being made
        self._claim_workers = asyncio.Semaphore(CLAIM_WORKERS)
        self._binding: set[asyncio.Task[None]] = set()
        self._deferred: set[tuple[str, str]] = set()  # pods whose claim a binding in flight writes
        self._unschedulable: set[tuple[str, str]] = set()
        self._bound: dict[str, str] = {}  # uid -> node of the pods this scheduler bound
        self._events = EventRecorder(client, "gpudra-scheduler")
        self.filter = NodeFilter(self.state, self._events)
        self._explained: dict[int, tuple[NodesFailure, str]] = {}  # remembered failures, worded
        self.workloads = Workloads(client, self.state.pods)
        self.daemonsets = DaemonSets(client, self.state.pods)
        self.eviction = DeviceTaintEviction(client, self.state)
        self.state.listeners.append(self.eviction.poke)
        self.synced = asyncio.Event()

    # ------------------------------------------------------------------ events in

    def _enqueue(self, key: tuple[str, str]) -> None:
        """A pod to schedule: its claims are made first (concurrently with other pods'), then it is queued."""
        if key not in self._claiming and key not in self._queued:
            self._claiming[key] = asyncio.create_task(self._claims_then_queue(key), name=f"claims {key}")

    async def _claims_then_queue(self, key: tuple[str, str]) -> None:
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

    def _queue_for_scheduling(self, key: tuple[str, str]) -> None:
        """Queue a pod; higher priority first (kube-scheduler's order), then first come first served."""
        if key not in self._queued:
            self._queued.add(key)
            self._sequence += 1
            pod = self.state.pods.cache.get(key) or {}
            self._queue.put_nowait((-pod_priority(pod), self._sequence, key))

    async def _on_pod(self, kind: str, body: dict[str, Any]) -> None:
        self.filter.pod_event(kind, body, self._dra_resources())
        meta = body["metadata"]
        if kind == "DELETED":
            self._bound.pop(meta["uid"], None)
            await self._release(meta["uid"])
            self._unschedulable.discard((meta.get("namespace", ""), meta["name"]))
            self._retry_unschedulable()
            return
        phase = (body.get("status") or {}).get("phase")
        if body["spec"].get("nodeName") and phase not in ("Succeeded", "Failed"):
            return  # bound and running: nothing to do until it finishes or goes
        self._enqueue((meta.get("namespace", ""), meta["name"]))

    async def _on_claim(self, kind: str, body: dict[str, Any]) -> None:
        """After the state recorded the claim's allocation: retry pods if devices came free, deallocate unused."""
        if self.state.changed != self._changed_seen:
            self._changed_seen = self.state.changed
            self._retry_unschedulable()
        status = body.get("status") or {}
        if kind != "DELETED" and status.get("allocation") and not status.get("reservedFor"):
            await self._deallocate(body)

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
            workloads = [self.workloads.deployments, self.workloads.jobs, *self.daemonsets.informers]
            tasks += [asyncio.create_task(i.run(), name=f"informer {i.resource.plural}") for i in workloads]
            await asyncio.gather(*(i.synced.wait() for i in workloads))
            self.synced.set()
            retry = asyncio.create_task(self._periodic_retry())
            tasks += [retry, asyncio.create_task(self.eviction.run(), name="device taint eviction")]
            while True:
                _, _, key = await self._queue.get()
                self._queued.discard(key)
                try:
                    await self.sync_pod(key)
                except GpudraError as exc:
                    log.warning("pod sync failed; will retry", pod="/".join(key), error=str(exc))
                    self._unschedulable.add(key)
        finally:
            tasks += [*self._claiming.values(), *self._binding]
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
            await self._release(pod.metadata.uid or "")
            return None
        if pod.metadata.deletion_timestamp or pod.spec.node_name or pod.metadata.uid in self._bound:
            return None  # bound already (the cache may lag behind our own binding)
        return pod

    async def make_claims(self, key: tuple[str, str]) -> bool:
        """The resourceclaim controller's part: the pod's claims from templates and its extended-resource claim
        exist and are recorded in its status; False when the pod is not to be scheduled (yet)."""
        body = self.state.pods.cache.get(key)
        pod = await self._pending(body)
        if pod is None or body is None:
            return False
        names, status = await self._ensure_claims(pod, body)
        extended = self._extended_requests(pod)
        if names is not None and extended:
            status["extendedResourceClaimStatus"] = extended_status(
                await self._ensure_extended_claim(pod, extended), extended
            )
        have = body.get("status") or {}
        changed = {k: v for k, v in status.items() if have.get(k) != v}
        if changed:  # one write of the pod's status for all its claims
            await self._client.patch(
                PODS,
                pod.metadata.name or "",
                {"status": changed},
                pod.metadata.namespace,
                subresource="status",
            )
        if names is None:
            self._unschedulable.add(key)  # a template is missing: retried when one appears
            return False
        return True

    async def sync_pod(self, key: tuple[str, str]) -> None:
        """The scheduling cycle of one pod whose claims were made."""
        body = self.state.pods.cache.get(key)
        pod = await self._pending(body)
        if pod is None or body is None or await self.filter.gated(body):
            return
        names = self._claim_names(pod)
        if names is None:
            self._enqueue(key)  # a claim of the pod was deleted meanwhile: made again first
            return
        claims = [self.state.claims.cache.get((key[0], name)) for name in names]
        if any(c is None for c in claims):
            self._unschedulable.add(key)  # a named claim that does not exist yet
            return
        await self._schedule(pod, body, [c for c in claims if c is not None])

    def _claim_names(self, pod: Pod) -> list[str] | None:
        """The names of every claim of the pod, from the caches; None if one of those made for it is missing."""
        names = []
        for pod_claim_name, name in pod_claim_names(pod).items():
            found = name or self._find_generated(pod, pod_claim_name)
            if found is None:
                return None
            names.append(found)
        if self._extended_requests(pod):
            extended = self._find_extended(pod)
            if extended is None:
                return None
            names.append(extended)
        return names

    async def _ensure_claims(self, pod: Pod, body: dict[str, Any]) -> tuple[list[str] | None, dict[str, Any]]:
        """Create missing claims from templates: the claim names (None while a template is missing) and the
        pod status that records them."""
        namespace = pod.metadata.namespace or "default"
        wanted = pod_claim_names(pod)
        statuses = []
        missing_template = False
        for pod_claim in pod.spec.resource_claims or []:
            name = wanted[pod_claim.name]
            if pod_claim.resource_claim_template_name and name is None:
                name = self._find_generated(pod, pod_claim.name)
                if name is None:
                    template_body = self.state.templates.cache.get(
                        (namespace, pod_claim.resource_claim_template_name)
                    )
                    if template_body is None:
                        missing_template = True
                        await self._events.post(
                            body, "Warning", "FailedResourceClaimCreation",
                            f"resourceclaimtemplate {pod_claim.resource_claim_template_name!r} not found",
                        )  # fmt: skip
                        continue
                    template = ResourceClaimTemplate.model_validate(template_body)
                    created = await self._client.create(
                        RESOURCE_CLAIMS, claim_from_template(pod, pod_claim, template), namespace
                    )
                    self.state.remember_claim(created)
                    name = created["metadata"]["name"]
            if pod_claim.resource_claim_template_name:
                statuses.append({"name": pod_claim.name, "resourceClaimName": name})
            wanted[pod_claim.name] = name
        status = {"resourceClaimStatuses": statuses} if statuses else {}
        if missing_template:
            return None, status
        return [n for n in wanted.values() if n is not None], status

    async def _ensure_extended_claim(self, pod: Pod, requests: list[ExtendedRequest]) -> str:
        """The name of the pod's one claim for extended resources backed by DRA, created once."""
        namespace = pod.metadata.namespace or "default"
        name = self._find_extended(pod)
        if name is None:
            created = await self._client.create(RESOURCE_CLAIMS, extended_claim(pod, requests), namespace)
            name = created["metadata"]["name"]
            self.state.remember_claim(created)
        return name

    def _extended_requests(self, pod: Pod) -> list[ExtendedRequest]:
        return extended_requests(pod, class_for_resource(list(self.state.classes.cache.values())))

    def _find_extended(self, pod: Pod) -> str | None:
        for claim in self.state.owned_claims(pod.metadata.uid or ""):
            meta = claim["metadata"]
            if (
                meta.get("namespace") == pod.metadata.namespace
                and (meta.get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) == "true"
            ):
                return str(meta["name"])
        return None

    def _find_generated(self, pod: Pod, pod_claim_name: str) -> str | None:
        for claim in self.state.owned_claims(pod.metadata.uid or ""):
            if claim["metadata"].get("namespace") == pod.metadata.namespace and is_generated_for(
                claim, pod, pod_claim_name
            ):
                return str(claim["metadata"]["name"])
        return None

    async def _schedule(self, pod: Pod, body: dict[str, Any], claims: list[dict[str, Any]]) -> None:
        key = (pod.metadata.namespace or "", pod.metadata.name or "")
        if any(self.state.writing(c["metadata"]["uid"]) for c in claims):
            # a claim shared with a pod being bound: scheduled when that write is done
            self._deferred.add(key)
            return
        pending = [c for c in claims if not (c.get("status") or {}).get("allocation")]
        allocated = [c for c in claims if (c.get("status") or {}).get("allocation")]
        await self.filter.tell_unsupported(body, SYSTEM_PRIORITIES)
        nodes = self.state.node_infos()
        for claim in allocated:
            node = allocated_node(claim)
            if node is not None:
                nodes = [n for n in nodes if n.name == node]
        verdict = self.filter.feasible(body, nodes, self._dra_resources())
        if not verdict.nodes:
            self._unschedulable.add(key)
            message = (
                verdict.message()
                if nodes
                else "0 nodes are available: the pod's claims are allocated on different nodes"
            )
            await self._events.post(body, "Warning", "FailedScheduling", message)
            return
        nodes = verdict.nodes
        allocator = self.state.allocator()
        node_name = self._least_loaded(nodes) if not claims else nodes[0].name
        outcome: Any = None
        if pending:
            models = [ResourceClaim.model_validate(c) for c in pending]
            outcome = allocator.find_node(models, nodes)
            if not isinstance(outcome, Allocation):
                self._unschedulable.add(key)
                message = self._why(allocator, models, nodes, outcome)
                await self._events.post(body, "Warning", "FailedScheduling", message)
                for claim in pending:
                    await self._events.post(claim, "Warning", "FailedAllocation", message)
                return
            node_name = outcome.node
        results = {c.key: c.result for c in outcome.claims} if outcome is not None else {}
        writes: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
        for claim in claims:
            result = results.get(f"{claim['metadata']['namespace']}/{claim['metadata']['name']}")
            if result is not None:
                result = result.model_copy(update={"allocation_timestamp": _now()})
                self.state.assume(claim["metadata"]["uid"], result)
            writes.append((claim, result.to_wire() if result is not None else None))
        self._bound[pod.metadata.uid or ""] = node_name
        self.filter.assume(body, node_name, self._dra_resources())
        task = asyncio.create_task(self._bind(key, body, writes, node_name), name=f"bind {key}")
        self._binding.add(task)
        task.add_done_callback(self._binding.discard)

    def _why(
        self,
        allocator: Allocator,
        claims: list[ResourceClaim],
        nodes: list[NodeInfo],
        outcome: Failure | NodesFailure,
    ) -> str:
        """FailedScheduling's message: the nearest miss first, as the controller's Event words it. The allocator
        answers again with the same failure object while nothing was freed nor republished: worded once."""
        remembered = self._explained.get(id(outcome))
        if remembered is not None and remembered[0] is outcome:
            return remembered[1]
        examined = (
            examine(outcome, claims, nodes, allocator) if isinstance(outcome, NodesFailure) else outcome
        )
        said = explain_outcome(
            examined,
            snapshot=allocator.snapshot,
            holders=self.state.holders(),
            classes=list(allocator.classes),
        )
        text = said.text()
        if isinstance(outcome, NodesFailure):
            if len(self._explained) > 256:
                self._explained.clear()
            self._explained[id(outcome)] = (outcome, text)
        return text

    async def _bind(
        self,
        key: tuple[str, str],
        pod: dict[str, Any],
        writes: list[tuple[dict[str, Any], dict[str, Any] | None]],
        node_name: str,
    ) -> None:
        """The binding cycle: every claim's allocation and reservation written, then the pod bound to the node.
        On failure the assumed allocations are dropped and the pod is scheduled again."""
        meta = pod["metadata"]
        try:
            await asyncio.gather(*(self._reserve(claim, pod, allocation) for claim, allocation in writes))
            await self._client.create_subresource(
                PODS, meta["name"], "binding",
                {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": meta["name"]},
                 "target": {"apiVersion": "v1", "kind": "Node", "name": node_name}},
                meta["namespace"],
            )  # fmt: skip
        except GpudraError as exc:
            log.warning("binding the pod failed; will retry", pod="/".join(key), error=str(exc))
            self._bound.pop(meta["uid"], None)
            self.filter.forget(meta["uid"])
            for claim, allocation in writes:
                if allocation is not None:
                    claim_key = (claim["metadata"]["namespace"], claim["metadata"]["name"])
                    self.state.unassume(claim["metadata"]["uid"], self.state.claims.cache.get(claim_key))
            self._unschedulable.add(key)
            return
        finally:
            deferred, self._deferred = self._deferred, set()
            for waiting in sorted(deferred):
                self._enqueue(waiting)
        log.info(
            "pod bound", pod="/".join(key), node=node_name, claims=[c["metadata"]["name"] for c, _ in writes]
        )

    def _least_loaded(self, nodes: list[NodeInfo]) -> str:
        """For pods without claims: spread them over the nodes by the number of pods there (this scheduler's
        latest bindings included, before the cache shows them)."""
        return min(nodes, key=lambda n: (self.filter.load(n.name), n.name)).name

    def _dra_resources(self) -> set[str]:
        """Extended resources that DRA serves (not node allocatable): left out of NodeResourcesFit."""
        return set(class_for_resource(list(self.state.classes.cache.values())))

    async def _reserve(
        self, claim: dict[str, Any], pod: dict[str, Any], allocation: dict[str, Any] | None
    ) -> None:
        """Write allocation (when new) and add the pod to reservedFor, retrying on conflicts with a fresh read."""
        meta = claim["metadata"]
        for _ in range(5):
            status = dict(claim.get("status") or {})
            if allocation is not None:
                status["allocation"] = allocation
            reserved = list(status.get("reservedFor") or [])
            if all(r.get("uid") != pod["metadata"]["uid"] for r in reserved):
                reserved.append(_consumer(pod))
            status["reservedFor"] = reserved
            try:
                updated = await self._client.replace(
                    RESOURCE_CLAIMS, {**claim, "status": status}, subresource="status"
                )
                self.state.remember_claim(updated)
                self.state.written(meta["uid"], updated)
                return
            except ConflictError:
                claim = await self._client.get(RESOURCE_CLAIMS, meta["name"], meta["namespace"])
        raise ConflictError(f"resourceclaim {meta['namespace']}/{meta['name']}: too many write conflicts")

    # ------------------------------------------------------------------ release

    async def _release(self, pod_uid: str) -> None:
        """Drop a gone or finished pod from reservedFor of every claim; unused claims are deallocated."""
        for cached in list(self.state.claims.cache.values()):
            claim: dict[str, Any] | None = cached
            for _ in range(5):  # a write conflict: again from the claim as it is now
                reserved = ((claim or {}).get("status") or {}).get("reservedFor") or []
                if claim is None or not any(r.get("uid") == pod_uid for r in reserved):
                    break
                remaining = [r for r in reserved if r.get("uid") != pod_uid]
                status = dict(claim["status"])
                status["reservedFor"] = remaining or None
                if not remaining:
                    status.pop("allocation", None)
                    status.pop("devices", None)
                claim = await self._write_status(claim, status)

    async def _deallocate(self, claim: dict[str, Any]) -> None:
        status = {k: v for k, v in (claim.get("status") or {}).items() if k not in ("allocation", "devices")}
        await self._write_status(claim, status)

    async def _write_status(self, claim: dict[str, Any], status: dict[str, Any]) -> dict[str, Any] | None:
        """Write the claim's status; on a conflict, the claim as it is now (None: written, or the claim is gone)."""
        meta = claim["metadata"]
        body = {**claim, "status": {k: v for k, v in status.items() if v is not None}}
        try:
            updated = await self._client.replace(RESOURCE_CLAIMS, body, subresource="status")
        except NotFoundError:
            self.state.record_allocation(meta["uid"], None)
            return None
        except ConflictError:
            fresh = await self._client.get(RESOURCE_CLAIMS, meta["name"], meta["namespace"])
            await self.state.claim_event("MODIFIED", fresh)
            return fresh
        self.state.remember_claim(updated)
        await self.state.claim_event("MODIFIED", updated)
        self._retry_unschedulable()
        return None
