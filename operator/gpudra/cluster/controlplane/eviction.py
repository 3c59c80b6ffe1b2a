"""The stand-in of kube-controller-manager's device-taint-eviction-controller, for the embedded cluster.

A pod bound to a node whose allocated claims (those it is in the ``reservedFor`` of: the claims its spec names and,
as from Kubernetes 1.37, the claim the scheduler made for its extended resources) hold a device with a NoExecute
taint it does not tolerate, from the device's ResourceSlice or from a DeviceTaintRule, is evicted when the taint's
time comes (:func:`gpudra.allocator.taintrules.claim_eviction`): as the real controller does, a Normal Event
``DeviceTaintManagerEviction`` ("Marking for deletion") on the pod, the pod condition ``DisruptionTarget`` True with
reason ``DeletionByDeviceTaintManager``, then a delete of that incarnation of the pod (uid precondition). Its
claims are then released as for any deleted pod, and its workload, if any, makes a new pod, which the stand-in
scheduler keeps off the tainted device.

The set of bound pods is re-examined after every change of pods, claims, slices or rules, and when the next
eviction falls due.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from typing import Any

from gpudra.allocator import Eviction, claim_eviction
from gpudra.api.core import Pod
from gpudra.api.dra import DeviceTaint, DeviceTaintRule, ResourceClaim
from gpudra.api.timestamps import rfc3339
from gpudra.cluster.controlplane.state import ClusterState
from gpudra.errors import ConflictError, GpudraError, NotFoundError
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.resources import PODS
from gpudra.planning.podclaims import pod_claim_names
from gpudra.telemetry import get_logger

log = get_logger(__name__)
CONDITION_REASON = "DeletionByDeviceTaintManager"
CONDITION_MESSAGE = "Device Taint manager: deleting due to NoExecute taint"
EVENT_REASON = "DeviceTaintManagerEviction"


def published_noexecute(slices: Iterable[dict[str, Any]]) -> dict[tuple[str, str, str], list[DeviceTaint]]:
    """(driver, pool, device) -> the NoExecute taints the newest generation of its pool publishes for it."""
    newest: dict[tuple[str, str], int] = {}
    for body in slices:
        spec = body.get("spec") or {}
        key = (spec.get("driver", ""), (spec.get("pool") or {}).get("name", ""))
        newest[key] = max(newest.get(key, 0), int((spec.get("pool") or {}).get("generation") or 0))
    out: dict[tuple[str, str, str], list[DeviceTaint]] = {}
    for body in slices:
        spec = body.get("spec") or {}
        pool = spec.get("pool") or {}
        key = (spec.get("driver", ""), pool.get("name", ""))
        if int(pool.get("generation") or 0) != newest[key]:
            continue
        for device in spec.get("devices") or []:
            taints = [t for t in device.get("taints") or [] if t.get("effect") == "NoExecute"]
            if taints:
                out[(*key, device.get("name", ""))] = [DeviceTaint.model_validate(t) for t in taints]
    return out


def _has_noexecute(body: dict[str, Any]) -> bool:
    return any(
        t.get("effect") == "NoExecute"
        for device in (body.get("spec") or {}).get("devices") or []
        for t in device.get("taints") or []
    )


def pod_eviction(
    pod: Pod,
    claims: dict[tuple[str, str], dict[str, Any]],
    published: dict[tuple[str, str, str], list[DeviceTaint]],
    rules: list[DeviceTaintRule],
    *,
    extended: bool = True,
) -> Eviction | None:
    """When (and why) a bound pod is to be evicted; None when none of its claims' devices calls for it.
    ``extended``: its extended-resource claim counts too (Kubernetes 1.37+), not only those its spec names."""
    if not pod.spec.node_name:
        return None
    namespace = pod.metadata.namespace or ""
    earliest: Eviction | None = None
    names = list(pod_claim_names(pod).values())
    extended_status = pod.status.extended_resource_claim_status if pod.status is not None else None
    if extended and extended_status is not None:
        names.append(extended_status.resource_claim_name)
    for name in names:
        body = claims.get((namespace, name or ""))
        if body is None:
            continue
        claim = ResourceClaim.model_validate(body)
        status = claim.status
        if status is None or status.allocation is None or status.allocation.devices is None:
            continue
        if not any(r.uid == pod.metadata.uid for r in status.reserved_for or ()):
            continue
        eviction = claim_eviction(
            status.allocation.devices.results or [],
            lambda driver, pool, device: published.get((driver, pool, device), []),
            rules,
        )
        if eviction is not None and (earliest is None or eviction.at < earliest.at):
            earliest = eviction
    return earliest


class DeviceTaintEviction:
    def __init__(self, client: KubeClient, state: ClusterState, *, extended: bool = True) -> None:
        """``extended``: a pod's extended-resource claim counts (``pod_eviction``)."""
        self._client = client
        self._extended = extended
        self._state = state
        self._events = EventRecorder(client, "device-taint-eviction-controller")
        self._wake = asyncio.Event()
        self._evicted: set[str] = set()  # pod uids already handled
        self._slice_noexecute: dict[tuple[str, str], tuple[str, bool]] = {}
        """Slice key -> (its resourceVersion, whether a device of it has a NoExecute taint): a poke (every
        claim and pod change) re-reads only the slices that changed, not every device of the fleet."""

    def poke(self) -> None:
        """Something the decision depends on changed: look again."""
        self._wake.set()

    async def run(self) -> None:
        while True:
            self._wake.clear()
            next_due = await self._round(time.time())
            timeout = None if next_due is None else max(next_due - time.time(), 0.05)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    async def _round(self, now: float) -> float | None:
        """Evict the pods whose time has come; the time of the next eviction (None: none is planned)."""
        state = self._state
        if not self._can_evict():
            return None
        published = published_noexecute(state.slices.cache.values())
        next_due: float | None = None
        live = set()
        for body in list(state.pods.cache.values()):
            pod = Pod.model_validate(body)
            uid = pod.metadata.uid or ""
            live.add(uid)
            if uid in self._evicted or pod.metadata.deletion_timestamp:
                continue
            eviction = pod_eviction(pod, state.claims.cache, published, state.rules, extended=self._extended)
            if eviction is None:
                continue
            if eviction.at > now:
                next_due = eviction.at if next_due is None else min(next_due, eviction.at)
                continue
            self._evicted.add(uid)
            await self._evict(body, eviction)
        self._evicted &= live
        return next_due

    def _can_evict(self) -> bool:
        """Whether anything can evict at all: a NoExecute rule, or a NoExecute taint on some published device."""
        if any(r.spec.taint.effect == "NoExecute" for r in self._state.rules):
            return True
        seen: dict[tuple[str, str], tuple[str, bool]] = {}
        found = False
        for key, body in self._state.slices.cache.items():
            version = str((body.get("metadata") or {}).get("resourceVersion") or "")
            known = self._slice_noexecute.get(key)
            if known is None or known[0] != version or not version:
                known = (version, _has_noexecute(body))
            seen[key] = known
            found = found or known[1]
        self._slice_noexecute = seen
        return found

    async def _evict(self, body: dict[str, Any], eviction: Eviction) -> None:
        meta = body["metadata"]
        log.info(
            "evicting a pod whose device has an untolerated NoExecute taint",
            pod=f"{meta.get('namespace')}/{meta['name']}",
            taints=list(eviction.taints),
        )
        try:
            latest = await self._client.get_raw(PODS, meta["name"], meta.get("namespace"))
            if latest["metadata"].get("uid") != meta.get("uid") or latest["metadata"].get(
                "deletionTimestamp"
            ):
                return
            await self._events.post(latest, "Normal", EVENT_REASON, "Marking for deletion")
            conditions = [
                c
                for c in (latest.get("status") or {}).get("conditions") or []
                if c.get("type") != "DisruptionTarget"
            ]
            conditions.append(
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "lastTransitionTime": rfc3339(),
                    "reason": CONDITION_REASON,
                    "message": CONDITION_MESSAGE,
                }
            )
            await self._client.patch(
                PODS,
                meta["name"],
                {"status": {"conditions": conditions}},
                meta.get("namespace"),
                subresource="status",
            )
            await self._client.delete(PODS, meta["name"], meta.get("namespace"), uid=meta.get("uid"))
        except (NotFoundError, ConflictError):
            return
        except GpudraError as exc:
            log.warning("evicting a pod failed; will retry", pod=meta["name"], error=str(exc))
            self._evicted.discard(meta.get("uid", ""))
            asyncio.get_running_loop().call_later(1.0, self.poke)
