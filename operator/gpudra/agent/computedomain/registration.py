"""An IMEX daemon's entry in its domain's ComputeDomainClique object: register, report, release.

The object ``<domainUID>.<cliqueID>`` in the driver's namespace holds one entry per node of the domain in
that clique (``computedomain.index.register_daemon`` decides the entry: the lowest free index below 18,
kept while the node is registered). Every daemon of the clique writes the same object:

- the object is created by server-side apply, without entries, so that the daemons finding it missing together
  do not conflict (a create would answer 409 AlreadyExists to all but one);
- registering picks an index from what was read, so that write carries the resourceVersion it read; a 409
  means another daemon wrote first, and the write is redone on a fresh read after a short randomized backoff
  (growing, capped) so that 18 daemons starting together settle in a few rounds instead of retrying in
  lockstep (capped at 0.25 s: a higher cap left the last daemon of a busy clique waiting seconds after the
  others);
- once registered, a daemon refreshes its own entry (Ready, NotReady) with a JSON patch that tests the entry's
  position instead of carrying the resourceVersion, so daemons turning Ready together do not conflict.

The object carries the domain's labels so the controller finds (and at deletion removes) it.

Used by three callers: ``gpudra imex-daemon`` (the per-domain DaemonSet's pod), the embedded cluster's
simulated daemon, and the agent itself in host-managed mode (the node's one daemon serving every domain).
"""

from __future__ import annotations

import asyncio
import random
from typing import Any, Literal

from gpudra.api.computedomain import ComputeDomainClique, ComputeDomainDaemonInfo
from gpudra.api.meta import ObjectMeta
from gpudra.computedomain.index import register_daemon
from gpudra.computedomain.names import (
    COMPONENT_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    OBJECT_LABEL,
    clique_object_name,
)
from gpudra.errors import ConflictError, GpudraError, KubeError, NotFoundError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import COMPUTE_DOMAIN_CLIQUES
from gpudra.telemetry import get_logger

log = get_logger(__name__)
CLIQUE_LABEL_KEY = "computedomain.gpudra.dev/clique"
"""On the clique object: its clique id (label values allow the ``<uuid>.<id>`` form)."""
DaemonState = Literal["Ready", "NotReady"]


class CliqueRegistration:
    """One node's entry in one domain's clique object."""

    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        domain_uid: str,
        clique_id: str,
        node_name: str,
        ip_address: str,
        max_backoff: float = 0.25,
    ) -> None:
        self._client = client
        self.namespace = namespace
        self.domain_uid = domain_uid
        self.clique_id = clique_id
        self.node_name = node_name
        self.ip_address = ip_address
        self.name = clique_object_name(domain_uid, clique_id)
        self._max_backoff = max_backoff
        self.index: int | None = None
        self.conflicts = 0

    async def _read(self) -> tuple[ComputeDomainClique, bool]:
        try:
            body = await self._client.get(COMPUTE_DOMAIN_CLIQUES, self.name, self.namespace)
        except NotFoundError:
            labels = {
                OBJECT_LABEL: self.domain_uid,
                CLIQUE_LABEL_KEY: self.clique_id,
                COMPONENT_LABEL: "clique",
                MANAGED_BY_LABEL: MANAGED_BY,
            }
            meta = ObjectMeta(name=self.name, namespace=self.namespace, labels=labels)
            return ComputeDomainClique(metadata=meta, daemons=[]), False
        return ComputeDomainClique.from_wire(body), True

    async def _write(self, clique: ComputeDomainClique) -> None:
        body: dict[str, Any] = clique.to_wire()
        body.setdefault("daemons", [])
        await self._client.replace(COMPUTE_DOMAIN_CLIQUES, body)

    async def _ensure_exists(self, empty: ComputeDomainClique) -> None:
        """Create the clique object, without entries, by server-side apply: the daemons of a clique starting
        together all find it missing, and an apply that finds it created meanwhile leaves it as it is (where a
        create would answer 409 AlreadyExists to all but one). Its labels only: the daemons stay untouched."""
        body = {key: value for key, value in empty.to_wire().items() if key != "daemons"}
        await self._client.patch(
            COMPUTE_DOMAIN_CLIQUES, self.name, body, self.namespace, patch_type="apply", force=True
        )

    async def _refresh_in_place(self, clique: ComputeDomainClique, entry: ComputeDomainDaemonInfo) -> bool:
        """Refresh this node's entry where it already holds its index, with a JSON patch that tests the entry is
        still at the position read: the API server applies it to the object as it is then (no resourceVersion),
        so daemons reporting Ready together do not conflict. False where the node has no entry yet (registering
        picks an index from what was read, so that write carries the resourceVersion). Raises ConflictError
        where the entry moved (another daemon registered or left in between): read again."""
        daemons = clique.daemons or []
        position = next((i for i, d in enumerate(daemons) if d.node_name == self.node_name), None)
        if position is None or daemons[position].index != entry.index:
            return False
        patch = [
            {"op": "test", "path": f"/daemons/{position}/nodeName", "value": self.node_name},
            {"op": "replace", "path": f"/daemons/{position}", "value": entry.to_wire()},
        ]
        try:
            await self._client.patch(
                COMPUTE_DOMAIN_CLIQUES, self.name, patch, self.namespace, patch_type="json"
            )
        except NotFoundError as exc:
            raise ConflictError(f"clique {self.name} is gone; registering again") from exc
        except KubeError as exc:
            if exc.status != 422:  # a failed test: the entry is no longer at that position
                raise
            raise ConflictError(f"this node's entry in clique {self.name} moved") from exc
        return True

    async def _backoff(self, attempt: int) -> None:
        self.conflicts += 1
        ceiling = min(self._max_backoff, 0.01 * 2**attempt)
        await asyncio.sleep(random.uniform(ceiling / 2, ceiling))

    async def report(self, status: DaemonState) -> int:
        """Register (or refresh) this node's entry with ``status``; return its index. Retries conflicts;
        raises CliqueFullError (all 18 indices taken) and KubeError other than 409."""
        report = ComputeDomainDaemonInfo(
            node_name=self.node_name, ip_address=self.ip_address, clique_id=self.clique_id, status=status
        )
        attempt = 0
        while True:
            clique, exists = await self._read()
            if not exists:
                await self._ensure_exists(clique)
                continue
            updated = register_daemon(clique, report)
            entry = next(d for d in updated.daemons or [] if d.node_name == self.node_name)
            if updated.daemons == clique.daemons:
                self.index = entry.index
                return entry.index or 0
            try:
                if not await self._refresh_in_place(clique, entry):
                    await self._write(updated)
            except ConflictError:
                await self._backoff(attempt)
                attempt += 1
                continue
            self.index = entry.index
            log.info(
                "IMEX daemon registered",
                node=self.node_name,
                clique=self.name,
                index=entry.index,
                status=status,
            )
            return entry.index or 0

    async def release(self) -> None:
        """Remove this node's entry (its index becomes free). Best effort: logged, never raised."""
        attempt = 0
        while True:
            try:
                clique, exists = await self._read()
                kept = [d for d in clique.daemons or [] if d.node_name != self.node_name]
                if not exists or len(kept) == len(clique.daemons or []):
                    return
                await self._write(clique.model_copy(update={"daemons": kept}))
                log.info("IMEX daemon released", node=self.node_name, clique=self.name)
                return
            except ConflictError:
                await self._backoff(attempt)
                attempt += 1
            except GpudraError as exc:
                log.warning("releasing the IMEX daemon entry failed", clique=self.name, error=str(exc))
                return


class DaemonStatus:
    """What the daemon says about itself now; ``set`` wakes the reporter."""

    def __init__(self) -> None:
        self.value: DaemonState = "NotReady"
        self.changed = asyncio.Event()

    def set(self, value: DaemonState) -> None:
        if value != self.value:
            self.value = value
            self.changed.set()


async def keep_reported(registration: CliqueRegistration, status: DaemonStatus, stop: asyncio.Event) -> None:
    """Keep the entry saying what ``status`` says until ``stop`` is set (or the task is cancelled), then
    release it. Failures other than conflicts (the API server briefly away, a full clique) are logged and
    retried with a growing delay."""
    delay = 0.1
    reported: DaemonState | None = None
    try:
        while not stop.is_set():
            wanted = status.value
            status.changed.clear()
            if wanted != reported:
                try:
                    await registration.report(wanted)
                    reported, delay = wanted, 0.1
                except GpudraError as exc:
                    log.warning("IMEX daemon registration failed; retrying", error=str(exc))
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
                    continue
            waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(status.changed.wait())]
            try:
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in waiters:
                    task.cancel()
    finally:
        await asyncio.shield(registration.release())
