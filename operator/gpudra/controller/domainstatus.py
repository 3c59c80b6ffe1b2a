"""The one status writer of all ComputeDomains: coalesced, conflict-free, and silent when nothing changed.

Watch events mark domains dirty; the writer wakes, waits ``computedomain_status_batch_seconds`` so that a
burst (256 pods landing, 64 daemons registering) becomes one recomputation per domain, computes each dirty
domain's status from the ``DomainView``, and sends a JSON merge patch of only the changed fields to the
status subresource — no resourceVersion, so it cannot 409, and no write at all when the status is the same
(NVIDIA #816: 256 pods took ~8 minutes behind 409 retries of full status updates). The patched object
returned becomes the new baseline at once, so the echo of its own write is a no-op.

Events on the domain say what is missing: a node that lost its fabric, changed clique, is gone or is held
by another domain, and nodes of different cliques, are reported at once; a node still waiting for its
daemon only after ``computedomain_event_grace_seconds`` (starting up is not a problem). A Normal event
marks the domain Ready, and Ready over more nodes than before. The EventRecorder drops repeats of the same message.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

from gpudra.api.computedomain import ComputeDomain
from gpudra.api.dra import ResourceClaim
from gpudra.api.timestamps import parse_rfc3339, rfc3339
from gpudra.computedomain import DomainStatus, DomainView, status_patch
from gpudra.config import ControllerSettings
from gpudra.errors import ConflictError, KubeError, NotFoundError
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.resources import COMPUTE_DOMAINS
from gpudra.metrics import Metrics
from gpudra.telemetry import get_logger

log = get_logger(__name__)
URGENT = frozenset({"FabricLost", "CliqueChanged", "NodeGone", "NodeHeld"})
RETRY_SECONDS = 1.0


def _age_seconds(domain: ComputeDomain) -> float | None:
    created = domain.metadata.creation_timestamp
    if not created:
        return None
    try:
        return (datetime.now(UTC) - parse_rfc3339(created)).total_seconds()
    except ValueError:
        return None


def _involved(domain: ComputeDomain) -> dict[str, Any]:
    meta = domain.metadata
    return {
        "apiVersion": domain.api_version,
        "kind": domain.kind,
        "metadata": {"name": meta.name, "namespace": meta.namespace, "uid": meta.uid},
    }


class DomainStatusWriter:
    def __init__(
        self,
        client: KubeClient,
        metrics: Metrics,
        view: DomainView,
        settings: ControllerSettings,
        events: EventRecorder,
    ) -> None:
        self._client = client
        self._metrics = metrics
        self.view = view
        self._settings = settings
        self._events = events
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._ready_observed: set[str] = set()
        self._waiting_since: dict[tuple[str, str, str], float] = {}
        self.deleting: set[str] = set()

    def mark(self, uids: set[str]) -> None:
        if uids:
            self._dirty |= uids
            self._wake.set()

    def claim_changed(self, claim: ResourceClaim | None, uid: str) -> None:
        """A claim changed (None: gone, or it does not parse): the domains it concerns are written again."""
        self.mark(self.view.claim_changed(claim, uid))

    def forget(self, uid: str) -> None:
        self._dirty.discard(uid)
        self._ready_observed.discard(uid)
        self._waiting_since = {k: v for k, v in self._waiting_since.items() if k[0] != uid}
        self._update_gauge()

    async def run(self) -> None:
        """Flush dirty domains forever; a resync re-evaluates NotReady ones (Event grace, lost events)."""
        resync = asyncio.get_running_loop().create_task(self._resync())
        try:
            while True:
                await self._wake.wait()
                await asyncio.sleep(self._settings.computedomain_status_batch_seconds)
                self._wake.clear()
                dirty, self._dirty = self._dirty, set()
                await asyncio.gather(*(self._flush_logged(uid) for uid in sorted(dirty)))
        finally:
            resync.cancel()

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self._settings.computedomain_resync_seconds)
            self.mark(
                {
                    uid
                    for uid, domain in self.view.domains.items()
                    if domain.status is None or domain.status.status != "Ready"
                }
            )

    async def _flush_logged(self, uid: str) -> None:
        try:
            await self.flush(uid)
        except Exception:  # one domain's failure must not stop the writer
            log.exception("ComputeDomain status update failed", uid=uid)
            self._retry_later(uid)

    def _retry_later(self, uid: str) -> None:
        asyncio.get_running_loop().call_later(RETRY_SECONDS, self.mark, {uid})

    async def flush(self, uid: str) -> None:
        domain = self.view.domains.get(uid)
        if domain is None or uid in self.deleting or domain.metadata.deletion_timestamp:
            return
        computed = self.view.status_of(uid, rfc3339())
        if computed is None:
            return
        stored = domain.status
        patch = status_patch(stored, computed)
        if patch is not None and not await self._write(domain, uid, patch):
            return
        ready_before = len(stored.nodes or []) if stored is not None and stored.status == "Ready" else 0
        self._update_gauge()  # before the Events: whoever sees DomainReady sees the gauge say so
        await self._report(domain, computed, ready_before=ready_before)

    async def _write(self, domain: ComputeDomain, uid: str, patch: dict[str, Any]) -> bool:
        meta = domain.metadata
        try:
            written = await self._client.patch(
                COMPUTE_DOMAINS, meta.name or "", patch, meta.namespace, subresource="status"
            )
        except NotFoundError:
            return False  # deleted meanwhile; its DELETED event drops it from the view
        except ConflictError:
            self._metrics.computedomain_status_conflicts.inc()
            self._retry_later(uid)
            return False
        except KubeError as exc:
            self._metrics.computedomain_status_writes.labels("failed").inc()
            log.warning("writing ComputeDomain status failed; retrying", domain=meta.name, error=str(exc))
            self._retry_later(uid)
            return False
        self._metrics.computedomain_status_writes.labels("written").inc()
        self.view.domain_changed(ComputeDomain.from_wire(written), uid)
        return True

    async def _report(self, domain: ComputeDomain, computed: DomainStatus, *, ready_before: int) -> None:
        """``ready_before``: how many nodes the stored status had Ready (0: it was not Ready)."""
        uid = domain.metadata.uid or ""
        involved = _involved(domain)
        if computed.condition("CliqueConsistent").reason == "MultipleCliques":
            cliques = sorted({n.clique_id for n in computed.status.nodes or []})
            await self._events.post(
                involved,
                "Warning",
                "MultipleCliques",
                f"pods of this domain run in {len(cliques)} NVLink cliques ({', '.join(cliques)}), each its own "
                "IMEX domain: GPU memory is shared over NVLink only within a clique",
            )
        if computed.ready:
            # Ready with no node yet is no news; Ready over more nodes than the stored status is (with numNodes 0
            # nodes that joined and got ready within one batch never made it NotReady in between)
            if len(computed.status.nodes or []) > ready_before:
                age = _age_seconds(domain)
                if uid not in self._ready_observed and age is not None:
                    self._metrics.computedomain_ready_seconds.observe(max(age, 0.0))
                self._ready_observed.add(uid)
                await self._events.post(
                    involved, "Normal", "DomainReady", computed.condition("Ready").message
                )
            self._waiting_since = {k: v for k, v in self._waiting_since.items() if k[0] != uid}
            return
        ready = computed.condition("Ready")
        if ready.reason == "CliqueMismatch":
            await self._events.post(involved, "Warning", "CliqueMismatch", ready.message)
        now = time.monotonic()
        current = {(uid, p.node_name, p.reason): p for p in computed.problems}
        self._waiting_since = {k: v for k, v in self._waiting_since.items() if k[0] != uid or k in current}
        for key, problem in current.items():
            since = self._waiting_since.setdefault(key, now)
            if problem.reason in URGENT or now - since >= self._settings.computedomain_event_grace_seconds:
                await self._events.post(
                    involved, "Warning", problem.reason, f"node {problem.node_name}: {problem.message}"
                )

    def _update_gauge(self) -> None:
        ready = sum(
            1 for d in self.view.domains.values() if d.status is not None and d.status.status == "Ready"
        )
        self._metrics.computedomains.labels("Ready").set(ready)
        self._metrics.computedomains.labels("NotReady").set(len(self.view.domains) - ready)
