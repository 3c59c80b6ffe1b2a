"""An IMEX daemon's entry in its domain's ComputeDomainClique object: register, report, release.

The object ``<domainUID>.<cliqueID>`` in the driver's namespace holds one entry per node of the domain in
that clique, and every daemon of the clique writes it, each only its own entry and never with a
read-modify-write of the whole object (``computedomain.entries`` says how and why):

- a node joins by appending its entry, without an index, with a JSON patch (``add /daemons/-``): the API
  server appends it to the list as it is when the patch arrives, so joining cannot conflict. The object is
  created where it is missing by server-side apply with an empty list, which daemons finding it missing
  together can all send (the list is a list-map keyed by nodeName: an apply that finds entries leaves them);
- it then writes the index dealt to it (the lowest free one, in the order the nodes joined) and its status with a
  JSON patch that tests only what the deal depends on: daemons joining together each write once, without
  colliding. A failed test (422: a node left meanwhile) is redone on a fresh read after a short randomized
  backoff (growing, capped at 0.25 s);
- later it refreshes its entry (Ready, NotReady) with a JSON patch that tests the entry's position, and at the
  end removes it the same way.

The object carries the domain's labels so the controller finds (and at deletion removes) it.

Used by three callers: ``gpudra imex-daemon`` (the per-domain DaemonSet's pod), the embedded cluster's
simulated daemon, and the agent itself in host-managed mode (the node's one daemon serving every domain).
"""

from __future__ import annotations

import asyncio
import random
from typing import Any, Literal

from gpudra.api.computedomain import API_VERSION, ComputeDomainClique, ComputeDomainDaemonInfo
from gpudra.computedomain import (
    COMPONENT_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    OBJECT_LABEL,
    JsonPatch,
    clique_object_name,
    joining_entry,
    own_entry_patch,
    release_patch,
)
from gpudra.errors import CliqueFullError, ConflictError, GpudraError, KubeError, NotFoundError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import COMPUTE_DOMAIN_CLIQUES
from gpudra.telemetry import get_logger

log = get_logger(__name__)
CLIQUE_LABEL_KEY = "computedomain.gpudra.dev/clique"
"""On the clique object: its clique id (label values allow the ``<uuid>.<id>`` form)."""
_PATCH_NOT_APPLIED = (
    "the server rejected our request due to an error in our request",  # kube-apiserver, nothing more said
    "the test of ",  # the embedded API server
)
MAX_REDOS = 20
"""Writes redone in a row before the conflict is raised (the caller tries again later, with a longer delay)."""
DaemonState = Literal["Ready", "NotReady"]


def failed_test(exc: KubeError) -> bool:
    """Whether a refused JSON patch did not apply, i.e. failed a ``test`` (what it depends on changed: read
    again), as opposed to another 422 (the admission policy's refusal, an invalid entry) that would fail the
    same way again. kube-apiserver answers a patch that does not apply with a bare 422 "the server rejected
    our request due to an error in our request" (no cause: a position-tested patch of ours fails only its
    tests); the embedded server says "the test of <path> failed". Refusals say "is forbidden" or "is invalid"."""
    said = str(exc)
    return exc.status == 422 and any(phrase in said for phrase in _PATCH_NOT_APPLIED)


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
        self._seen: ComputeDomainClique | None = None
        """The object as the last answer showed it: the next patch's positions come from it."""
        self.index: int | None = None
        self.conflicts = 0
        """Writes that found the object changed under them (a failed test, a 409) and were redone."""

    async def _read(self) -> ComputeDomainClique | None:
        try:
            return await self._client.get(COMPUTE_DOMAIN_CLIQUES, self.name, self.namespace)
        except NotFoundError:
            return None

    async def _create(self) -> None:
        """Create the clique object, with an empty daemons list, by server-side apply: the daemons of a clique
        that find it missing together all succeed (a create would answer 409 AlreadyExists to all but one), and
        an apply that finds it created meanwhile leaves its entries as they are (a list-map: items the applier
        does not send stay)."""
        labels = {
            OBJECT_LABEL: self.domain_uid,
            CLIQUE_LABEL_KEY: self.clique_id,
            COMPONENT_LABEL: "clique",
            MANAGED_BY_LABEL: MANAGED_BY,
        }
        body: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": "ComputeDomainClique",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": labels},
            "daemons": [],
        }
        await self._client.patch(
            COMPUTE_DOMAIN_CLIQUES, self.name, body, self.namespace, patch_type="apply", force=True
        )

    async def _join(self, report: ComputeDomainDaemonInfo) -> ComputeDomainClique:
        """Append this node's entry (no index yet) with a JSON patch: the API server appends it to the list
        as it is then, so joining cannot conflict. Where the object (or its list) is missing, it is created
        first."""
        append = [{"op": "add", "path": "/daemons/-", "value": joining_entry(report).to_wire()}]
        try:
            return await self._patch(append)
        except ConflictError:  # no object (404), or one without a daemons list (the patch did not apply)
            await self._create()
            return await self._patch(append)

    async def _patch(self, patch: JsonPatch) -> ComputeDomainClique:
        """Send a JSON patch of this node's entry; ConflictError where a test failed or the object is gone."""
        try:
            answer = await self._client.patch(
                COMPUTE_DOMAIN_CLIQUES, self.name, patch, self.namespace, patch_type="json"
            )
        except NotFoundError as exc:
            raise ConflictError(f"clique {self.name} is gone; registering again") from exc
        except KubeError as exc:
            if not failed_test(exc):
                raise
            raise ConflictError(f"clique {self.name} changed under this node's write") from exc
        return ComputeDomainClique.from_wire(answer)

    async def _backoff(self, attempt: int) -> None:
        self.conflicts += 1
        ceiling = min(self._max_backoff, 0.01 * 2**attempt)
        await asyncio.sleep(random.uniform(ceiling / 2, ceiling))

    async def report(self, status: DaemonState) -> int:
        """Register (or refresh) this node's entry with ``status``; return its index. Retries conflicts;
        raises CliqueFullError (no index left for it: its entry is removed again) and KubeError other than
        a failed test."""
        report = ComputeDomainDaemonInfo(
            node_name=self.node_name, ip_address=self.ip_address, clique_id=self.clique_id, status=status
        )
        attempt = 0
        while True:
            try:
                clique = self._seen = self._seen or await self._read()
                if clique is None or (planned := own_entry_patch(clique, report)) is None:
                    clique = self._seen = await self._join(report)
                    planned = own_entry_patch(clique, report)
                    assert planned is not None  # the apply's answer holds the entry it merged in
                index, patch = planned
                if patch:
                    self._seen = await self._patch(patch)
            except ConflictError:
                if attempt >= MAX_REDOS:
                    raise
                await self._backoff(attempt)
                attempt += 1
                self._seen = None
                self._seen = await self._read()
                continue
            except CliqueFullError:
                await self.release()
                raise
            except GpudraError:
                self._seen = None  # the next report starts from a fresh read
                raise
            if patch:
                log.info(
                    "IMEX daemon registered",
                    node=self.node_name,
                    clique=self.name,
                    index=index,
                    status=status,
                )
            self.index = index
            return index

    async def release(self) -> None:
        """Remove this node's entry (its index becomes free). Best effort: logged, never raised."""
        attempt = 0
        while True:
            try:
                clique = self._seen = await self._read()
                patch = release_patch(clique, self.node_name) if clique is not None else None
                if patch is None:
                    return
                self._seen = await self._patch(patch)
                self.index = None
                log.info("IMEX daemon released", node=self.node_name, clique=self.name)
                return
            except ConflictError as exc:
                if attempt >= MAX_REDOS:
                    log.warning("releasing the IMEX daemon entry failed", clique=self.name, error=str(exc))
                    return
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
