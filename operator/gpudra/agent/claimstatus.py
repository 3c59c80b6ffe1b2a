"""What a driver's prepare writes on the claim: ``status.devices`` entries (Ready, or the failure's reason, with a
``Healthy`` condition when the agent watches GPU health) and Events (FailedPrepare, DeviceUnhealthy,
DeviceRecovered).

``ClaimStatus`` keeps, per prepared claim, the unhealthy devices it last reported, so a health change touches
only the claims whose devices changed.

The writes after a prepare, an unprepare or a failed prepare run in the background, after the kubelet's answer
and once the node answers no call (:mod:`gpudra.agent.laterwrites`): ``prepared``, ``unprepared`` and ``failed``
are given to ``later.soon``, which holds the claim's turn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from gpudra.agent.checkpoint import CheckpointStore, DeviceRecord
from gpudra.agent.health import DeviceProblem
from gpudra.agent.kubeletplugin.messages import ClaimRef
from gpudra.agent.laterwrites import LaterWrites
from gpudra.agent.prepareplan import device_status, merge_device_statuses
from gpudra.api.dra import DeviceRequestAllocationResult, ResourceClaim
from gpudra.api.timestamps import rfc3339
from gpudra.errors import ConflictError, KubeError, NotFoundError, PrepareError
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.resources import RESOURCE_CLAIMS
from gpudra.telemetry import get_logger

log = get_logger(__name__)
Problems = Callable[[], Mapping[str, DeviceProblem]]
HealthView = frozenset[tuple[str, str]]


def _view(devices: Iterable[DeviceRecord], problems: Mapping[str, DeviceProblem]) -> HealthView:
    """(device, reason) of a claim's unhealthy devices: what the last report said."""
    return frozenset(
        (d.device_name, problems[d.device_name].reason) for d in devices if d.device_name in problems
    )


class ClaimStatus:
    """Status entries and Events on the claims of one driver on one node. ``problems`` (when the agent watches
    GPU health) says which devices are unhealthy now and why. ``later``: when the writes after the kubelet's
    answers run (the node's calls in flight, shared by its drivers, are counted there)."""

    def __init__(
        self,
        client: KubeClient,
        events: EventRecorder,
        *,
        driver: str,
        node: str,
        problems: Problems | None = None,
        shared_pool: Callable[[str], bool] | None = None,
        later: LaterWrites | None = None,
    ) -> None:
        self._client = client
        self._events = events
        self.driver = driver
        self.node = node
        self._problems = problems
        self._health_view: dict[str, HealthView] = {}
        self._written: dict[str, dict[str, Any]] = {}
        """What this agent's last status write of each claim answered (uid, resourceVersion, status.devices): the
        next write (the unprepare's) starts from it instead of reading the claim again. The patch is conditional
        on that resourceVersion, so a claim changed since fails it and is read afresh."""
        self._shared_pool = shared_pool
        """Pools that are not node-local (a PodGroup-scoped ComputeDomain's channel): their devices get no
        status entry. Every node where a pod of the claim runs prepares the one device, and an entry (keyed by
        driver, pool and device) cannot say which node it is about; kube-apiserver refuses the write anyway,
        as the agent may change the status of claims allocated on its own node only."""
        self.later = later or LaterWrites()

    def _node_local(self, pool: str) -> bool:
        return self._shared_pool is None or not self._shared_pool(pool)

    async def prepared(
        self, ref: ClaimRef, devices: Sequence[DeviceRecord], claim: ResourceClaim | None = None
    ) -> None:
        """The claim's devices are prepared: Ready entries, each with its health. ``claim``: the claim as the
        prepare read it, to write from without reading it again (a conflict reads it afresh)."""
        problems = self._problems() if self._problems is not None else {}
        devices = [d for d in devices if self._node_local(d.pool_name)]
        await self._update(ref, self._ready(devices, problems), read=_status_part(claim) if claim else None)
        self._health_view[ref.uid] = _view(devices, problems)

    async def unprepared(self, ref: ClaimRef) -> None:
        """The claim's devices were unprepared here: this node's entries go."""
        self._health_view.pop(ref.uid, None)
        await self._update(ref, [])

    async def failed(
        self,
        ref: ClaimRef,
        claim: ResourceClaim | None,
        results: Sequence[DeviceRequestAllocationResult],
        error: PrepareError,
    ) -> None:
        """The prepare failed: a FailedPrepare Event (unless the claim is gone) and not-Ready entries."""
        involved = claim if claim is not None else ref.event_object()
        if error.reason not in ("ClaimNotFound", "ClaimReplaced"):
            await self._events.post(
                involved, "Warning", "FailedPrepare", f"node {self.node}: {error.reason}: {error}"
            )
        results = [r for r in results if self._node_local(r.pool)]
        if results:
            entries = [
                device_status(
                    self.driver, r.pool, r.device, ready=False, reason=error.reason, message=str(error),
                    now=rfc3339(), share_id=r.share_id,
                )
                for r in results
            ]  # fmt: skip
            await self._update(ref, entries)

    async def report_health(self, store: CheckpointStore, *, refresh: bool = False) -> None:
        """Bring the Healthy condition of every prepared claim's devices in line with the health watcher: set it
        False with the reason when a device turned unhealthy, True again when it recovered, with an Event on the
        claim for each change. Claims whose devices did not change are not touched unless ``refresh`` (at start,
        to correct what a previous agent wrote)."""
        if self._problems is None:
            return
        problems = self._problems()
        claims = store.claims()
        for uid in set(self._health_view) - set(claims):
            del self._health_view[uid]
        for uid, entry in claims.items():
            view = _view(entry.devices, problems)
            before = self._health_view.get(uid, frozenset())
            if entry.state != "PrepareCompleted" or (view == before and not refresh):
                continue
            ref = ClaimRef(namespace=entry.namespace, uid=uid, name=entry.name)
            async with store.claim_lock(uid):
                current = store.get(uid)
                if current is None or current.state != "PrepareCompleted":
                    continue
                async with self.later.turns.hold(uid):
                    await self._update(ref, self._ready(current.devices, problems))
            self._health_view[uid] = view
            await self._post_health_events(ref, before, view, problems)

    def _ready(
        self, devices: Sequence[DeviceRecord], problems: Mapping[str, DeviceProblem]
    ) -> list[dict[str, Any]]:
        watched = self._problems is not None
        return [
            device_status(
                self.driver, d.pool_name, d.device_name, ready=True, reason="Prepared",
                message=f"prepared on node {self.node}", now=rfc3339(), share_id=d.share_id,
                data={"uuid": d.uuid, "type": d.device_type, "cdiDeviceIDs": list(d.cdi_device_ids)},
                health=problems.get(d.device_name, "Healthy") if watched else None,
            )
            for d in devices
        ]  # fmt: skip

    async def _post_health_events(
        self, ref: ClaimRef, before: HealthView, after: HealthView, problems: Mapping[str, DeviceProblem]
    ) -> None:
        involved = ref.event_object()
        for device, _ in sorted(after - before):
            message = f"node {self.node}: device {device}: {problems[device].message}"
            await self._events.post(involved, "Warning", "DeviceUnhealthy", message)
        for device in sorted({d for d, _ in before} - {d for d, _ in after}):
            message = f"node {self.node}: device {device} is healthy again"
            await self._events.post(involved, "Normal", "DeviceRecovered", message)

    async def _update(
        self, ref: ClaimRef, ours: list[dict[str, Any]], attempts: int = 5, read: dict[str, Any] | None = None
    ) -> None:
        """Replace this node's entries of our driver in ``status.devices``; others' entries are kept. Best
        effort: the claim may be gone, and a failure here does not undo a prepare. ``read``: a recent read of
        the claim's status part (:func:`_status_part`) for the first attempt, else what the last write here
        answered; the patch is conditional on its resourceVersion."""
        read = read or self._written.pop(ref.uid, None)
        for _ in range(attempts):
            try:
                claim = read or await self._client.get_raw(RESOURCE_CLAIMS, ref.name, ref.namespace)
                read = None
            except NotFoundError:
                return
            except KubeError as exc:
                log.warning("reading the claim for its status failed", uid=ref.uid, error=str(exc))
                return
            meta = claim.get("metadata", {})
            if meta.get("uid") != ref.uid:
                return
            existing = (claim.get("status") or {}).get("devices") or []
            merged = merge_device_statuses(existing, driver=self.driver, pool=self.node, ours=ours)
            if merged == existing:
                if ours:
                    self._written[ref.uid] = claim
                return
            patch = {
                "metadata": {"resourceVersion": meta.get("resourceVersion")},
                "status": {"devices": merged or None},
            }
            try:
                answer = await self._client.patch(
                    RESOURCE_CLAIMS, ref.name, patch, ref.namespace, subresource="status"
                )
            except ConflictError:
                continue
            except KubeError as exc:
                log.warning("updating the claim status failed", uid=ref.uid, error=str(exc))
                return
            if ours:
                self._written[ref.uid] = _raw_status_part(answer)
            return


def _status_part(claim: ResourceClaim) -> dict[str, Any]:
    """What ``_update`` reads of a claim (uid, resourceVersion, status.devices), in the wire form, from a model.
    ``AllocatedDeviceStatus`` holds every field of a status.devices entry, so nothing is dropped."""
    devices = (claim.status.devices if claim.status is not None else None) or []
    meta = claim.metadata
    return {
        "metadata": {"uid": meta.uid, "resourceVersion": meta.resource_version},
        "status": {"devices": [d.to_wire() for d in devices]},
    }


def _raw_status_part(claim: dict[str, Any]) -> dict[str, Any]:
    """The same part of a claim in the wire form the API server sent."""
    meta = claim.get("metadata") or {}
    return {
        "metadata": {"uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")},
        "status": {"devices": (claim.get("status") or {}).get("devices") or []},
    }
