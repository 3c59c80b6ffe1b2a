"""The stand-in workload controllers of kube-controller-manager: Deployment -> ReplicaSet -> pods, and Jobs.

A Deployment owns one ReplicaSet per pod template (rollout.py); the ReplicaSet makes the pods; a Job makes its
pods until enough succeeded (jobstatus.py). Each writes the status the real controller writes, so ``kubectl get``,
``kubectl rollout status`` and ``kubectl wait --for=condition=complete`` read them as on a real cluster, and posts
the real controllers' Events (ScalingReplicaSet, SuccessfulCreate, SuccessfulDelete, Completed).

Not modelled: a rolling update's pace (the old ReplicaSets are scaled to 0 at once, the new one to the full
count), minReadySeconds, progress deadlines, Indexed Jobs, suspension and pod failure policies.

Changes of the objects and of their pods mark the object to reconcile; one worker reconciles the marked objects
one at a time, each from the informers' latest view, so that no two reconciles of one object create pods twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from gpudra.api.core import Workload
from gpudra.api.timestamps import rfc3339
from gpudra.errors import GpudraError
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.informer import Informer
from gpudra.kube.resources import DEPLOYMENTS, JOBS, PODS, REPLICASETS, Resource
from gpudra.telemetry import get_logger

from . import jobstatus, rollout
from .jobstatus import job_plan, job_pod_labels
from .rollout import (
    HASH_LABEL,
    controller_uid,
    deployment_status,
    desired,
    is_active,
    is_ready,
    owner_reference,
    replicaset_for,
    replicaset_status,
    revision_of,
    template_hash,
)

log = get_logger(__name__)
Key = tuple[str, str, str]  # (kind, namespace, name)
RETRY_SECONDS = 1.0


def pod_for(owner: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    """Pure: a pod from the owner's template, controlled by it, named ``<owner>-<5 characters>``."""
    meta = owner["metadata"]
    template = (owner.get("spec") or {}).get("template") or {}
    template_meta = template.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{meta['name']}-",
            "namespace": meta["namespace"],
            "labels": dict(labels if labels is not None else template_meta.get("labels") or {}),
            "annotations": dict(template_meta.get("annotations") or {}),
            "ownerReferences": [owner_reference(owner)],
        },
        "spec": template.get("spec") or {},
    }


def _changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return (old.get("status") or {}) != new


class Workloads:
    """The Deployment, ReplicaSet and Job controllers over the control plane's pod informer."""

    def __init__(self, client: KubeClient, pods: Informer) -> None:
        self._client = client
        self._pods = pods
        parse = Workload.model_validate
        self.deployments = Informer(client, DEPLOYMENTS, self._on_owner("Deployment"), parse=parse)
        self.replicasets = Informer(client, REPLICASETS, self._on_replicaset, parse=parse)
        self.jobs = Informer(client, JOBS, self._on_owner("Job"), parse=parse)
        self._events = {
            kind: EventRecorder(client, component, window_seconds=1)
            for kind, component in (
                ("Deployment", "deployment-controller"),
                ("ReplicaSet", "replicaset-controller"),
                ("Job", "job-controller"),
            )
        }
        self._unmodelled = EventRecorder(client, "gpudra-workload-controllers")
        self._dirty: dict[Key, None] = {}
        self._wake = asyncio.Event()

    @property
    def informers(self) -> list[Informer]:
        return [self.deployments, self.replicasets, self.jobs]

    # ------------------------------------------------------------------ what to reconcile
    def _mark(self, key: Key) -> None:
        self._dirty[key] = None
        self._wake.set()

    def _on_owner(self, kind: str) -> Callable[[str, dict[str, Any]], Any]:
        async def handle(event: str, body: dict[str, Any]) -> None:
            if event != "DELETED":
                self._mark((kind, body["metadata"]["namespace"], body["metadata"]["name"]))

        return handle

    async def _on_replicaset(self, event: str, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        if event != "DELETED":
            self._mark(("ReplicaSet", meta["namespace"], meta["name"]))
        self._mark_owner(body)

    def pod_changed(self, pod: dict[str, Any]) -> None:
        """A pod changed or went: its ReplicaSet or Job looks again."""
        self._mark_owner(pod)

    def _mark_owner(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        for ref in meta.get("ownerReferences") or []:
            if ref.get("controller") and ref.get("kind") in ("Deployment", "ReplicaSet", "Job"):
                self._mark((str(ref["kind"]), meta.get("namespace", ""), str(ref.get("name", ""))))

    async def reconcile(self, body: dict[str, Any]) -> None:
        """Bring one Deployment, ReplicaSet or Job (``body``, as the informer has it) to what it wants."""
        reconcile = {"Deployment": self._deployment, "ReplicaSet": self._replicaset, "Job": self._job}
        unmodelled = {"Deployment": rollout.unmodelled, "Job": jobstatus.unmodelled}.get(body["kind"])
        fields = unmodelled(body) if unmodelled is not None else []
        if fields:
            await self._unmodelled.post(
                body,
                "Warning",
                "NotModelled",
                f"the embedded cluster's {body['kind'].lower()} controller ignores {', '.join(fields)} "
                "(see docs/embedded-cluster.md)",
            )
        await reconcile[body["kind"]](body)

    async def run(self) -> None:
        """Reconcile what was marked, one object at a time, until cancelled."""
        informers = {"Deployment": self.deployments, "ReplicaSet": self.replicasets, "Job": self.jobs}
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._dirty:
                key = next(iter(self._dirty))
                del self._dirty[key]
                kind, namespace, name = key
                body = informers[kind].cache.get((namespace, name))
                if body is None:
                    continue
                try:
                    await self.reconcile(body)
                except GpudraError as exc:
                    log.warning("workload sync failed; will retry", kind=kind, name=name, error=str(exc))
                    asyncio.get_running_loop().call_later(RETRY_SECONDS, self._mark, key)
                except Exception:  # a bug must not stop every workload; said, and tried again later
                    log.exception("workload sync failed; will retry", kind=kind, name=name)
                    asyncio.get_running_loop().call_later(RETRY_SECONDS, self._mark, key)

    # ------------------------------------------------------------------ helpers
    def _owned_pods(self, owner: dict[str, Any]) -> list[dict[str, Any]]:
        uid, namespace = owner["metadata"]["uid"], owner["metadata"]["namespace"]
        return [p for (ns, _), p in self._pods.cache.items() if ns == namespace and controller_uid(p) == uid]

    async def _write_status(self, resource: Resource, body: dict[str, Any], status: dict[str, Any]) -> None:
        """Write ``status`` over the object's (a field it no longer has, a count now 0, is removed)."""
        if _changed(body, status):
            meta = body["metadata"]
            gone = {key: None for key in body.get("status") or {} if key not in status}
            await self._client.patch(
                resource,
                meta["name"],
                {"status": {**gone, **status}},
                meta["namespace"],
                subresource="status",
            )

    async def _create_pods(self, owner: dict[str, Any], count: int, labels: dict[str, str] | None) -> None:
        """``count`` pods in slow-start batches (1, 2, 4, ...; each batch concurrently), as Kubernetes' workload
        controllers create them: a failing create stops the rest instead of repeating the error count times."""
        namespace = owner["metadata"]["namespace"]
        batch = 1
        while count > 0:
            size = min(batch, count)
            created = await asyncio.gather(
                *(self._client.create(PODS, pod_for(owner, labels), namespace) for _ in range(size))
            )
            for pod in created:
                self._pods.cache[(namespace, pod["metadata"]["name"])] = pod
            events = self._events[owner["kind"]]
            await asyncio.gather(
                *(
                    events.post(owner, "Normal", "SuccessfulCreate", f"Created pod: {p['metadata']['name']}")
                    for p in created
                )
            )
            count -= size
            batch *= 2

    # ------------------------------------------------------------------ the three controllers
    async def _replicaset(self, replicaset: dict[str, Any]) -> None:
        namespace = replicaset["metadata"]["namespace"]
        active = [p for p in self._owned_pods(replicaset) if is_active(p)]
        missing = desired(replicaset) - len(active)
        await self._create_pods(replicaset, max(0, missing), None)
        # the pods that are not ready go first, then the newest
        newest = sorted(active, key=lambda p: str(p["metadata"].get("creationTimestamp", "")), reverse=True)
        extra = sorted(newest, key=is_ready)
        for pod in extra[: max(0, -missing)]:
            await self._client.delete(PODS, pod["metadata"]["name"], namespace)
            await self._events["ReplicaSet"].post(
                replicaset, "Normal", "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}"
            )
        if missing:
            log.info("replicaset scaled", name=replicaset["metadata"]["name"], change=missing)
        status = replicaset_status(replicaset, self._owned_pods(replicaset))
        await self._write_status(REPLICASETS, replicaset, status)

    async def _scale(self, deployment: dict[str, Any], replicaset: dict[str, Any], replicas: int) -> None:
        before = desired(replicaset)
        if before == replicas:
            return
        meta = replicaset["metadata"]
        patch = {
            "metadata": {
                "annotations": {"deployment.kubernetes.io/desired-replicas": str(desired(deployment))}
            },
            "spec": {"replicas": replicas},
        }
        await self._client.patch(REPLICASETS, meta["name"], patch, meta["namespace"])
        direction = "up" if replicas > before else "down"
        await self._events["Deployment"].post(
            deployment,
            "Normal",
            "ScalingReplicaSet",
            f"Scaled {direction} replica set {meta['name']} from {before} to {replicas}",
        )

    async def _deployment(self, deployment: dict[str, Any]) -> None:
        uid, namespace = deployment["metadata"]["uid"], deployment["metadata"]["namespace"]
        owned = [
            rs
            for (ns, _), rs in self.replicasets.cache.items()
            if ns == namespace and controller_uid(rs) == uid
        ]
        pod_hash = template_hash((deployment.get("spec") or {}).get("template") or {})
        new = next(
            (rs for rs in owned if (rs["metadata"].get("labels") or {}).get(HASH_LABEL) == pod_hash), None
        )
        if new is None:
            revision = max((revision_of(rs) for rs in owned), default=0) + 1
            new = await self._client.create(
                REPLICASETS, replicaset_for(deployment, pod_hash, revision), namespace
            )
            self.replicasets.cache[(namespace, new["metadata"]["name"])] = new
            owned.append(new)
            await self._events["Deployment"].post(
                deployment,
                "Normal",
                "ScalingReplicaSet",
                f"Scaled up replica set {new['metadata']['name']} from 0 to {desired(new)}",
            )
        else:
            await self._scale(deployment, new, desired(deployment))
        for old in owned:
            if old is not new:
                await self._scale(deployment, old, 0)
        status = deployment_status(deployment, new, owned, rfc3339())
        await self._write_status(DEPLOYMENTS, deployment, status)

    async def _job(self, job: dict[str, Any]) -> None:
        plan = job_plan(job, self._owned_pods(job), rfc3339())
        await self._create_pods(job, plan.create, job_pod_labels(job))
        completed = any(c.get("type") == "Complete" for c in plan.status.get("conditions") or [])
        was_completed = any(
            c.get("type") == "Complete" for c in (job.get("status") or {}).get("conditions") or []
        )
        await self._write_status(JOBS, job, plan.status)
        if completed and not was_completed:
            await self._events["Job"].post(job, "Normal", "Completed", "Job completed")
