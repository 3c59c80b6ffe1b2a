"""The controller's word on waiting pods: a pod that waits on a claim the controller explains gets a Warning Event
with that claim's explanation (the same reason code and text as the claim's Event), so that ``kubectl describe
pod`` says why on a real cluster too, where kube-scheduler says only "cannot allocate all claims". A pod asking for
an extended resource that a DeviceClass maps, with no claim yet (kube-scheduler makes it only once a node fits), is
explained as the claim kube-scheduler would make (``gpudra.planning.podclaims``). Events are deduplicated with a
count (``gpudra.kube.events``) and a new one is posted when the explanation changes. Only pods not bound to a node
are watched (a field selector): the controller never sees the rest.

A pending claim whose pod is bound to a node will never be allocated: kube-scheduler allocates a pod's claims only
while it schedules the pod. That is the claim of a pod created with ``spec.nodeName`` set, or one
kube-controller-manager made twice for the same entry and named in the pod's status after the scheduler had
allocated the first (kubernetes/kubernetes#140217). Such a claim is not explained by the allocator (which would
say where it fits) but said to be waiting on nothing, on the claim and on its pod (reason ``PodAlreadyBound``). Its
pod is not watched: a claim's owner that the watch of unbound pods does not hold is looked up by name (a list with
a field selector: the controller's role lists pods and does not get them), and remembered, bound, while it owns
claims. The claim itself is then read from the API server once (a list by name): kube-scheduler binds a pod after it
allocated its claims, and the pods' watch can bring the binding before the claims' watch brings the allocation."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpudra.api.core import Pod
from gpudra.api.dra import DeviceClass, ResourceClaim
from gpudra.api.meta import ObjectMeta
from gpudra.controller.pending import PendingClaims, Said, age_seconds, at_most
from gpudra.errors import GpudraError
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.informer import Informers
from gpudra.kube.resources import PODS, RESOURCE_CLAIMS
from gpudra.planning.boundclaims import BOUND_REASON, bound_pod_words, first_of_entry
from gpudra.planning.podclaims import (
    EXTENDED_CLAIM_ANNOTATION,
    POD_CLAIM_NAME_ANNOTATION,
    PodClaim,
    extended_resource_classes,
    implicit_uid,
    may_wait_on_claims,
    pod_claims,
    pod_owner,
)
from gpudra.telemetry import get_logger

log = get_logger(__name__)

_KEPT_ANNOTATIONS = (EXTENDED_CLAIM_ANNOTATION, POD_CLAIM_NAME_ANNOTATION)
UNBOUND = "spec.nodeName="
"""The field selector of the pods watched: those not bound to a node (a pod that gets bound leaves the watch)."""
LOOKUPS_AT_ONCE = 8
"""The reads of pods and claims an explain round has in flight at once (those of claims whose pod left the watch)."""


class PendingPods:
    def __init__(self, client: KubeClient, informers: Informers, pending: PendingClaims) -> None:
        self._client = client
        self._pending = pending
        self._events = EventRecorder(client, "gpudra-controller", series=True)
        self.waiting: dict[str, Pod] = {}
        """The pods that wait for the scheduler and may wait on claims, by uid."""
        self._owner: dict[str, str] = {}  # claim uid -> uid of the pod that controls it
        self._owned: dict[str, dict[str, ObjectMeta]] = {}  # pod uid -> claim uid -> the claim's metadata
        self._unbound: set[str] = set()
        """The uids of the pods not bound to a node (those of the watch; the waiting ones among them)."""
        self._bound: dict[str, dict[str, Any]] = {}
        """Pod uid -> the pod, bound to a node (its uid, name, namespace and node), while it owns claims."""
        self._unallocated: set[str] = set()
        """The uids of the claims the API server had unallocated after their pod was bound (until they change)."""
        informers.informer(PODS, field_selector=UNBOUND, parse=Pod.model_validate).subscribe(self._pod_event)

    async def _pod_event(self, kind: str, body: dict[str, Any]) -> None:
        uid = str((body.get("metadata") or {}).get("uid") or "")
        self.pod_changed(uid, None if kind == "DELETED" else Pod.model_validate(body))

    def pod_changed(self, uid: str, pod: Pod | None) -> None:
        """A pod changed (None: deleted, bound to a node, or it does not parse)."""
        if pod is None:
            self._unbound.discard(uid)
        else:
            self._unbound.add(uid)
        if pod is not None and may_wait_on_claims(pod):
            self.waiting[uid] = pod
        elif self.waiting.pop(uid, None) is not None:
            self._pending.forget(implicit_uid(uid))

    def claim_changed(self, uid: str, claim: ResourceClaim | None) -> None:
        """A claim changed (None: deleted): keep which pod controls it (what made it for the pod)."""
        self._unallocated.discard(uid)
        previous = self._owner.pop(uid, None)
        if previous is not None:
            owned = self._owned.get(previous, {})
            owned.pop(uid, None)
            if not owned:
                self._owned.pop(previous, None)
                self._bound.pop(previous, None)
        if claim is None:  # deleted: nothing more to keep (a third of a controller's claim changes)
            return
        meta = claim.metadata
        owner = pod_owner(meta)
        if owner is None:
            return
        annotations = {k: v for k, v in (meta.annotations or {}).items() if k in _KEPT_ANNOTATIONS}
        slim = ObjectMeta(
            name=meta.name, namespace=meta.namespace, annotations=annotations, owner_references=[owner]
        )
        self._owner[uid] = owner.uid
        self._owned.setdefault(owner.uid, {})[uid] = slim

    async def check_all(
        self,
        claims: list[ResourceClaim],
        classes: Mapping[str, DeviceClass],
        *,
        grace_seconds: float,
        due: Callable[[str], bool] = lambda _: True,
        planned: Sequence[ResourceClaim] = (),
    ) -> set[str]:
        """Explain these claims (``PendingClaims.check_all``, the planner serving them with ``planned``) with the
        claims kube-scheduler would make for the pods waiting longer than the grace period that are ``due`` (by
        their implicit uid), then tell each such pod what is said of its claims explained now. Return the uids
        explained."""
        now = time.time()
        extended = extended_resource_classes((n, c.spec.extended_resource_name) for n, c in classes.items())
        waits: dict[str, list[PodClaim]] = {}
        for uid, pod in list(self.waiting.items()):
            if age_seconds(pod.metadata, now) >= grace_seconds:
                waits[uid] = pod_claims(pod, self._owned.get(uid, {}).values(), extended)
        implicit: list[ResourceClaim] = []
        for uid, wanted in waits.items():
            made = next((c.implicit for c in wanted if c.implicit is not None), None)
            if made is None:
                self._pending.forget(implicit_uid(uid))
            elif due(implicit_uid(uid)):
                implicit.append(made)
        ours = self._pending.ours(classes)
        # Claims whose pod left the watch of unbound pods (usually none): is it bound, and are they still pending?
        maybe = [c for c in claims if self._maybe_bound(c) and ours(c)]
        owners = await self._bound_owners(maybe)
        held = [(c, owners[uid]) for c in maybe if (uid := c.metadata.uid or "") in owners]
        still = await at_most(LOOKUPS_AT_ONCE, [self._unallocated_now(c) for c, _ in held])
        bound = [pair for pair, unallocated in zip(held, still, strict=True) if unallocated]
        not_ours = {id(c) for c, _ in held}  # not the allocator's to explain: their pod is bound
        by_name = (  # only with pods to tell: it is every pending claim's name
            {c.metadata.namespaced_name: uid for uid, c in self._pending.unallocated.items()} if waits else {}
        )
        await self._pending.check_all(
            [c for c in claims if id(c) not in not_ours],
            classes,
            implicit,
            planned=[c for c in planned if self._owner.get(c.metadata.uid or "") not in self._bound],
            kept_off=self._kept_off(waits, by_name),
        )
        told = [(c, self._bound_said(c, owner)) for c, owner in bound]
        await self._pending.tell(told)
        for (_, owner), (_, bound_said) in zip(bound, told, strict=True):
            await self._events.post(owner, "Warning", bound_said.reason, bound_said.text)
        explained = {c.metadata.uid or "" for c in claims} | {c.metadata.uid or "" for c in implicit}
        for uid, wanted in waits.items():
            waiting = self.waiting.get(uid)
            if waiting is None:
                continue
            for claim_uid in _claim_uids(waiting, wanted, by_name):
                said = self._pending.said.get(claim_uid) if claim_uid in explained else None
                if said is not None:
                    await self._events.post(waiting, "Warning", said.reason, said.text)
        return explained

    def _kept_off(
        self, waits: Mapping[str, list[PodClaim]], by_name: Mapping[str, str]
    ) -> dict[str, dict[str, str]]:
        """Claim uid -> the nodes kube-scheduler's node filters keep its waiting pod off, and why (for the claims of
        the pods in ``waits`` kept off any node; a claim several such pods name: the first pod's)."""
        kept: dict[str, dict[str, str]] = {}
        for uid, wanted in waits.items():
            waiting = self.waiting.get(uid)
            off = self._pending.live.kept_off(waiting) if waiting is not None else {}
            if waiting is None or not off:
                continue
            for claim_uid in _claim_uids(waiting, wanted, by_name):
                kept.setdefault(claim_uid, off)
        return kept

    def _maybe_bound(self, claim: ResourceClaim) -> bool:
        """Whether a pod controls the claim and the watch of unbound pods does not hold it."""
        owner = self._owner.get(claim.metadata.uid or "")
        return owner is not None and owner not in self._unbound

    async def _bound_owners(self, claims: Sequence[ResourceClaim]) -> dict[str, dict[str, Any]]:
        """Claim uid -> the pod that owns it, for those of these claims (each one :meth:`_maybe_bound` holds) whose
        pod is bound to a node. A pod not remembered is looked up once, ``LOOKUPS_AT_ONCE`` at a time."""
        owner_of = {c.metadata.uid or "": self._owner[c.metadata.uid or ""] for c in claims}
        pods = {owner: self._bound[owner] for owner in owner_of.values() if owner in self._bound}
        unknown = {owner: uid for uid, owner in owner_of.items() if owner not in pods}
        found = await at_most(
            LOOKUPS_AT_ONCE,
            [
                self._look_up_bound(owner, self._owned.get(owner, {}).get(uid))
                for owner, uid in unknown.items()
            ],
        )
        pods.update((owner, pod) for owner, pod in zip(unknown, found, strict=True) if pod is not None)
        return {uid: pods[owner] for uid, owner in owner_of.items() if owner in pods}

    async def _unallocated_now(self, claim: ResourceClaim) -> bool:
        """Whether the API server has the claim unallocated now, not only the claims' watch: kube-scheduler binds a
        pod after it allocated the pod's claims, and the pods' watch may bring the binding before the claims' watch
        brings the allocation. A claim found unallocated after its pod was bound is remembered and not read again
        until it changes (:meth:`claim_changed`)."""
        meta = claim.metadata
        uid = meta.uid or ""
        if uid in self._unallocated:
            return True
        try:
            items, _ = await self._client.list_raw(
                RESOURCE_CLAIMS, meta.namespace, field_selector=f"metadata.name={meta.name}"
            )
        except GpudraError as exc:  # not said this round; read again at the next
            log.warning("reading a pending claim failed", claim=meta.namespaced_name, error=str(exc))
            return False
        for item in items:
            item_meta = item.get("metadata") or {}
            if item_meta.get("uid") == uid and not (item.get("status") or {}).get("allocation"):
                self._unallocated.add(uid)
                return True
        return False

    def _bound_said(self, claim: ResourceClaim, pod: dict[str, Any]) -> Said:
        """What is said of the claim its bound pod owns (``gpudra.planning.boundclaims``)."""
        meta = pod["metadata"]
        owned = self._owned.get(meta["uid"], {})
        others = ((m, uid not in self._pending.unallocated) for uid, m in owned.items())
        first = first_of_entry(claim.metadata, others)
        words = bound_pod_words(f"{meta['namespace']}/{meta['name']}", pod["spec"]["nodeName"], first)
        return Said(BOUND_REASON, words)

    async def _look_up_bound(self, owner: str, meta: ObjectMeta | None) -> dict[str, Any] | None:
        """The pod ``owner`` (uid) when it is bound to a node, remembered; None when it is not, or is gone."""
        if meta is None or not meta.owner_references:
            return None
        name = meta.owner_references[0].name
        try:
            items, _ = await self._client.list_raw(
                PODS, meta.namespace, field_selector=f"metadata.name={name}"
            )
        except GpudraError as exc:  # said as usual this round; looked up again at the next
            log.warning(
                "looking up a pending claim's pod failed", pod=name, namespace=meta.namespace, error=str(exc)
            )
            return None
        for item in items:
            item_meta = item.get("metadata") or {}
            node = (item.get("spec") or {}).get("nodeName")
            if item_meta.get("uid") == owner and node:
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name, "namespace": meta.namespace, "uid": owner},
                    "spec": {"nodeName": str(node)},
                }
                self._bound[owner] = pod
                return pod
        return None


def _claim_uids(pod: Pod, wanted: list[PodClaim], by_name: Mapping[str, str]) -> list[str]:
    """The uids of the pod's claims that are pending (``by_name``: namespace/name -> uid), the claim
    kube-scheduler would make for its extended resources by its imagined uid."""
    namespace = pod.metadata.namespace or "default"
    uids: list[str] = []
    for claim in wanted:
        if claim.implicit is not None:
            uids.append(implicit_uid(pod.metadata.uid or ""))
        elif claim.name is not None and (uid := by_name.get(f"{namespace}/{claim.name}")):
            uids.append(uid)
    return uids
