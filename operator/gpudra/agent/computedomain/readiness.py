"""Waiting, inside a channel claim's prepare, for this node's IMEX daemon of the domain to be Ready.

A channel is prepared only once the node's daemon is Ready in the clique object ``<domainUID>.<cliqueID>``.
Failing the prepare at once makes the kubelet retry it with a growing backoff (up to seconds), and each retry
costs reads of the claims, a gRPC call and an Event; at 64 trays that retry traffic, not the daemons, set the
pace. So the prepare waits, bounded (well inside the kubelet's 45 s per call), and is answered the moment the
daemon reports Ready; only past the bound does it fail with the reason (and the kubelet retries as before).
A wait that lasts (``NOTICE_AFTER``) is said on the claim as an Event, so a pod that is slow to start says why.

One read answers a claim whose daemon is Ready already; the claims that wait for one clique object share one
watch of it, opened while any waits and closed after, and a claim that finds that watch open reads it instead of
the API server (a node's channel claims arrive together: one read of the object for them all).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final

from gpudra.api.computedomain import ComputeDomainClique, ComputeDomainDaemonInfo
from gpudra.computedomain import check_daemon_ready, clique_object_name
from gpudra.errors import ComputeDomainError, GpudraError, InvalidInputError, NotFoundError, PrepareError
from gpudra.kube.client import KubeClient
from gpudra.kube.informer import Informer
from gpudra.kube.resources import COMPUTE_DOMAIN_CLIQUES
from gpudra.telemetry import get_logger

log = get_logger(__name__)
NOTICE_AFTER: Final = 5.0
"""Seconds a prepare waits before it says so on the claim."""
Notice = Callable[[str], Awaitable[object]]


class _CliqueWatch:
    """The latest state of one clique object, from a watch, and a wake-up for each change."""

    def __init__(self, client: KubeClient, namespace: str, name: str) -> None:
        self.daemons: list[ComputeDomainDaemonInfo] = []
        """The object's entries as of the latest event: read once per change, however many claims wait."""
        self.changed = asyncio.Condition()
        self.waiters = 0
        self._informer = Informer(
            client,
            COMPUTE_DOMAIN_CLIQUES,
            self._on_event,
            namespace=namespace,  # the agent's Role on cliques holds in the driver's namespace only
            field_selector=f"metadata.name={name}",
            parse=ComputeDomainClique.model_validate,
        )
        self._task = asyncio.create_task(self._informer.run(), name=f"clique watch {name}")

    @property
    def synced(self) -> asyncio.Event:
        return self._informer.synced

    async def _on_event(self, kind: str, body: dict[str, Any]) -> None:
        async with self.changed:
            self.daemons = [] if kind == "DELETED" else _daemons(body)
            self.changed.notify_all()

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


class DaemonReadiness:
    """Waits for the daemon of a domain on this node to be Ready (``wait``), at most ``timeout`` seconds."""

    def __init__(self, client: KubeClient, *, namespace: str, node: str, timeout: float) -> None:
        self._client = client
        self.namespace = namespace
        self.node = node
        self.timeout = timeout
        self._watches: dict[str, _CliqueWatch] = {}

    async def wait(self, domain_uid: str, clique_id: str, *, notice: Notice | None = None) -> None:
        """Return once the daemon is Ready; past the timeout raise DaemonNotReadyError saying what is awaited.
        ``notice`` is told what is awaited when the wait lasts NOTICE_AFTER seconds."""
        name = clique_object_name(domain_uid, clique_id)
        watch = self._watches.get(name)
        if watch is None:  # no other claim waits on this object: one read answers a daemon Ready already
            try:
                body = await self._client.get_raw(COMPUTE_DOMAIN_CLIQUES, name, self.namespace)
            except NotFoundError:
                body = None
            except GpudraError as exc:
                raise PrepareError(f"reading ComputeDomainClique {name}: {exc}", reason="ApiError") from exc
            if not self._awaited(_daemons(body), domain_uid):
                return
            watch = self._watches.get(name)  # opened by another claim meanwhile
            if watch is None:
                watch = self._watches[name] = _CliqueWatch(self._client, self.namespace, name)
        watch.waiters += 1
        try:
            first = min(NOTICE_AFTER, self.timeout) if notice is not None else self.timeout
            if await self._ready_within(watch, domain_uid, first):
                return
            if notice is not None and first < self.timeout:
                if awaited := self._awaited(watch.daemons, domain_uid):
                    await notice(awaited)
                if await self._ready_within(watch, domain_uid, self.timeout - first):
                    return
            # raises the reason it still waits (or passes: just Ready)
            check_daemon_ready(domain_uid, self.node, watch.daemons)
        finally:
            watch.waiters -= 1
            if watch.waiters == 0 and self._watches.get(name) is watch:
                del self._watches[name]
                await watch.close()

    async def _ready_within(self, watch: _CliqueWatch, domain_uid: str, seconds: float) -> bool:
        try:
            await asyncio.wait_for(self._until_ready(watch, domain_uid), seconds)
        except TimeoutError:
            return False
        return True

    def _awaited(self, daemons: list[ComputeDomainDaemonInfo], domain_uid: str) -> str:
        """What the claim waits for, as the clique object's entries ``daemons`` say ("" once the daemon is
        Ready)."""
        try:
            check_daemon_ready(domain_uid, self.node, daemons)
        except ComputeDomainError as exc:
            return str(exc)
        return ""

    async def _until_ready(self, watch: _CliqueWatch, domain_uid: str) -> None:
        await watch.synced.wait()
        async with watch.changed:
            while True:
                if not self._awaited(watch.daemons, domain_uid):
                    return
                await watch.changed.wait()


def _daemons(body: dict[str, Any] | None) -> list[ComputeDomainDaemonInfo]:
    """The entries of a clique object (none when it is missing, or unreadable: that is logged)."""
    if body is None:
        return []
    try:
        return ComputeDomainClique.from_wire(body).daemons or []
    except InvalidInputError as exc:
        log.warning(
            "unreadable ComputeDomainClique", name=(body.get("metadata") or {}).get("name"), error=str(exc)
        )
        return []
