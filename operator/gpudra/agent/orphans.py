"""Prepared claims whose ResourceClaim is gone: unprepared after a grace period, as the kubelet would have.

The kubelet unprepares a claim when the last pod using it on the node ends. When it cannot reach the plugin at that
moment (the agent down, the kubelet restarted, a pod or claim force-deleted), the claim can stay in the checkpoint
for good (kubernetes #141471, NVIDIA #1080). Its devices then stay held on the node, while the scheduler, which reads
only the API, already gives them to other claims: those claims' prepares fail with "already prepared for claim ...".

Every ``interval`` the sweeper reads the ResourceClaim of every claim in the checkpoint, by namespace and name. A
claim that is gone, or that has another UID (deleted and created again), is missing from that pass on; one missing
for ``grace`` seconds in a row is unprepared through the plugin's own unprepare (CDI spec, checkpoint entry, MIG
instances, sharing settings), logged, and named in a Warning Event on the Node. A claim seen again is forgotten. A
pass that cannot read the API is skipped, so an outage never counts as a deletion.

A ResourceClaim in use cannot be deleted (its delete-protection finalizer stays while pods reserve it), so a gone
claim means its pods have ended, or that somebody removed the finalizer by hand. The agent cannot list pods (its
RBAC grants none, by design): the grace period stands for the kubelet's time to stop a deleted pod's containers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Mapping

from gpudra.agent.checkpoint import ClaimEntry
from gpudra.agent.claimpreparer import ClaimPreparer
from gpudra.agent.kubeletplugin.messages import ClaimRef
from gpudra.errors import InvalidInputError, KubeError, NotFoundError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import RESOURCE_CLAIMS
from gpudra.metrics import Metrics
from gpudra.telemetry import get_logger

log = get_logger(__name__)
NodeWarning = Callable[[str, str], Awaitable[None]]


def overdue(
    missing_since: Mapping[str, float], missing: Collection[str], *, now: float, grace: float
) -> tuple[dict[str, float], list[str]]:
    """When each claim missing now was first seen missing (claims seen again are dropped), and those missing for
    ``grace`` seconds or more, sorted."""
    since = {uid: missing_since.get(uid, now) for uid in missing}
    return since, sorted(uid for uid, first in since.items() if now - first >= grace)


class OrphanSweeper:
    def __init__(
        self,
        preparer: ClaimPreparer,
        client: KubeClient,
        warn_node: NodeWarning,
        *,
        grace: float,
        interval: float,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._preparer = preparer
        self._client = client
        self._warn_node = warn_node
        self._grace = grace
        self._interval = interval
        self._metrics = metrics
        self._clock = clock
        self._missing_since: dict[str, float] = {}

    async def run(self) -> None:
        while True:
            await self.sweep()
            await asyncio.sleep(self._interval)

    async def sweep(self) -> list[str]:
        """One pass; the UIDs of the claims unprepared."""
        entries = self._preparer.store.claims()
        try:
            missing = [uid for uid, entry in entries.items() if await self._gone(uid, entry)]
        except KubeError as exc:
            log.warning(
                "could not read prepared claims' ResourceClaims; not sweeping this time", error=str(exc)
            )
            return []
        self._missing_since, due = overdue(self._missing_since, missing, now=self._clock(), grace=self._grace)
        swept = []
        for uid in due:
            if await self._unprepare(uid, entries[uid]):
                swept.append(uid)
                self._missing_since.pop(uid, None)
        return swept

    async def _gone(self, uid: str, entry: ClaimEntry) -> bool:
        """Whether the claim is gone or replaced by another of its name. One that does not parse is there: in
        doubt nothing is unprepared."""
        try:
            claim = await self._client.get(RESOURCE_CLAIMS, entry.name, entry.namespace)
        except NotFoundError:
            return True
        except InvalidInputError as exc:
            log.warning("a prepared claim's ResourceClaim does not parse; kept", uid=uid, error=str(exc))
            return False
        return claim.metadata.uid != uid

    async def _unprepare(self, uid: str, entry: ClaimEntry) -> bool:
        ref = ClaimRef(namespace=entry.namespace, uid=uid, name=entry.name)
        result = (await self._preparer.unprepare([ref]))[uid]
        claim = f"{entry.namespace}/{entry.name}"
        devices = ", ".join(d.device_name for d in entry.devices) or "none"
        if result.error:
            log.error(
                "could not unprepare a claim that is gone; will retry",
                claim=claim,
                uid=uid,
                error=result.error,
            )
            return False
        log.warning(
            "unprepared a claim that is gone", claim=claim, uid=uid, devices=devices, node=self._preparer.node
        )
        await self._warn_node(
            "OrphanedClaimUnprepared",
            f"ResourceClaim {claim} (uid {uid}) was gone for {self._grace:g}s while still prepared on this node "
            f"(devices: {devices}); unprepared it, as the kubelet had not",
        )
        if self._metrics is not None:
            self._metrics.recovery_actions.labels(self._preparer.node, "orphan_unprepared").inc()
        return True
