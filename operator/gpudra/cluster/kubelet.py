"""The embedded cluster's stand-in kubelet: one per simulated node, the DRA part of a real kubelet's pod sync.

It watches the pods bound to its node. For a new pod it reads the pod's claims, checks the pod is in each
claim's ``status.reservedFor``, and calls NodePrepareResources over the agent's REAL plugin sockets (registration
first, like the kubelet) for the claims allocated devices of the driver; then it marks the pod Running and Ready.
A failure posts Event FailedPrepareDynamicResources on the pod and is retried with backoff. When a pod goes
away, its claims that no other pod on the node still uses are unprepared (retried until they succeed).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpudra.agent.kubeletplugin import ClaimRef, KubeletClient
from gpudra.errors import GpudraError, KubeletPluginError, NotFoundError, PrepareError
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.informer import Informer
from gpudra.kube.resources import PODS, RESOURCE_CLAIMS
from gpudra.telemetry import get_logger

log = get_logger(__name__)
FAILED_PREPARE = "FailedPrepareDynamicResources"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_claim_names(pod: dict[str, Any]) -> list[str]:
    """The ResourceClaim names a pod uses; PrepareError while a template's claim is not created yet."""
    statuses = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    names = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = entry.get("resourceClaimName") or statuses.get(entry.get("name"))
        if not name:
            raise PrepareError(f"claim {entry.get('name')!r} of the pod is not created yet", reason="Waiting")
        names.append(name)
    return names


class StandInKubelet:
    def __init__(
        self,
        client: KubeClient,
        node: str,
        registration_socket: Path,
        *,
        driver: str = "gpu.nvidia.com",
        max_backoff: float = 5.0,
    ) -> None:
        self.node = node
        self.driver = driver
        self._client = client
        self._socket = registration_socket
        self._max_backoff = max_backoff
        self._informer = Informer(client, PODS, self._on_pod, field_selector=f"spec.nodeName={node}")
        self._events = EventRecorder(client, "kubelet", window_seconds=30)
        self._plugin: KubeletClient | None = None
        self._prepared: dict[str, list[ClaimRef]] = {}  # pod uid -> the claims prepared for it
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._background: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        try:
            await self._informer.run()
        finally:
            for task in [*self._tasks.values(), *self._background]:
                task.cancel()
            if self._plugin is not None:
                await asyncio.shield(self._plugin.close())

    async def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata", {})
        uid = meta.get("uid", "")
        if kind == "DELETED" or meta.get("deletionTimestamp"):
            task = self._tasks.pop(uid, None)
            if task is not None:
                task.cancel()
            self._spawn(self._release(uid))
            return
        phase = (pod.get("status") or {}).get("phase")
        if uid in self._prepared or uid in self._tasks or phase in ("Succeeded", "Failed"):
            return
        self._tasks[uid] = asyncio.create_task(self._start_pod(pod), name=f"kubelet {self.node} pod {uid}")

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _connect(self) -> KubeletClient:
        if self._plugin is None:
            plugin = KubeletClient(self._socket)
            try:
                await plugin.register()
            except BaseException:
                await plugin.close()
                raise
            self._plugin = plugin
        return self._plugin

    async def _drop_connection(self) -> None:
        plugin, self._plugin = self._plugin, None
        if plugin is not None:
            await plugin.close()

    async def _claims_to_prepare(self, pod: dict[str, Any]) -> list[ClaimRef]:
        meta = pod["metadata"]
        refs = []
        for name in pod_claim_names(pod):
            claim = await self._client.get(RESOURCE_CLAIMS, name, meta["namespace"])
            status = claim.get("status") or {}
            if not any(r.get("uid") == meta["uid"] for r in status.get("reservedFor") or []):
                raise PrepareError(f"pod is not yet in the reservedFor of claim {name}", reason="NotReserved")
            results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
            if any(r.get("driver") == self.driver for r in results):
                refs.append(ClaimRef(namespace=meta["namespace"], uid=claim["metadata"]["uid"], name=name))
        return refs

    async def _start_pod(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        delay = 0.1
        try:
            while True:
                try:
                    refs = await self._claims_to_prepare(pod)
                    if refs:
                        plugin = await self._connect()
                        results = await plugin.prepare(refs)
                        errors = [f"{r.name}: {results[r.uid].error}" for r in refs if results[r.uid].error]
                        if errors:
                            raise PrepareError("; ".join(errors))
                    self._prepared[uid] = refs
                    await self._set_running(pod)
                    return
                except NotFoundError as exc:
                    if "pods/" in str(exc):
                        return  # the pod is gone
                    await self._failed(pod, exc)
                except KubeletPluginError as exc:
                    await self._drop_connection()
                    await self._failed(pod, exc)
                except GpudraError as exc:
                    await self._failed(pod, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._max_backoff)
        finally:
            self._tasks.pop(uid, None)

    async def _failed(self, pod: dict[str, Any], exc: GpudraError) -> None:
        log.info(
            "preparing a pod's claims failed; will retry",
            node=self.node,
            pod=pod["metadata"]["name"],
            error=str(exc),
        )
        await self._events.post(pod, "Warning", FAILED_PREPARE, f"prepare dynamic resources: {exc}")

    async def _set_running(self, pod: dict[str, Any]) -> None:
        now = _now()
        conditions = [
            {"type": kind, "status": "True", "lastTransitionTime": now}
            for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        patch = {"status": {"phase": "Running", "conditions": conditions, "startTime": now}}
        meta = pod["metadata"]
        await self._client.patch(PODS, meta["name"], patch, meta["namespace"], subresource="status")

    async def _release(self, pod_uid: str) -> None:
        """Unprepare the pod's claims that no other pod on this node still uses; retry until done."""
        refs = self._prepared.pop(pod_uid, [])
        in_use = {r.uid for claims in self._prepared.values() for r in claims}
        refs = [r for r in refs if r.uid not in in_use]
        delay = 0.1
        while refs:
            with contextlib.suppress(GpudraError):
                plugin = await self._connect()
                results = await plugin.unprepare(refs)
                refs = [r for r in refs if results[r.uid].error]
                if not refs:
                    return
                log.warning("unprepare failed; will retry", node=self.node, claims=[r.name for r in refs])
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._max_backoff)
