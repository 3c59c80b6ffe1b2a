"""The stand-in control plane's view of the cluster: informers over the objects DRA scheduling reads, and the
allocator's snapshot kept in step with slices and claim allocations (incrementally, never rebuilt per pod).

As kube-scheduler's allocator does, the snapshot holds every slice with the taints of the DeviceTaintRules that
select its devices appended (:func:`gpudra.allocator.taintrules.taint_slice`); a rule's change re-taints every
slice."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpudra.allocator import (
    DEFAULT_KUBE_MINOR,
    Allocator,
    ClusterSnapshot,
    DeviceId,
    NodeInfo,
    taint_slice,
    unsupported_selector,
)
from gpudra.api.core import Namespace, Node, Pod
from gpudra.api.dra import (
    AllocationResult,
    DeviceClass,
    DeviceTaintRule,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.informer import Handler, Informer
from gpudra.kube.resources import (
    DEVICE_CLASSES,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    Resource,
    device_taint_rules,
)
from gpudra.telemetry import get_logger

log = get_logger(__name__)


def resource_version(body: dict[str, Any]) -> int:
    """The embedded API server's resourceVersions are increasing integers (as etcd's revisions are)."""
    try:
        return int(body["metadata"].get("resourceVersion") or 0)
    except ValueError:
        return 0


class ClusterState:
    """``on_pod``, ``on_claim`` and ``on_template`` are the control plane's reactions; claims update the
    snapshot first."""

    def __init__(
        self,
        client: KubeClient,
        *,
        on_pod: Handler | None = None,
        on_claim: Handler | None = None,
        on_template: Handler | None = None,
        taint_rules: Resource | None = None,
        kube_minor: int = DEFAULT_KUBE_MINOR,
    ) -> None:
        """``taint_rules``: DeviceTaintRule at the version the API server serves (default: v1, Kubernetes 1.37+);
        ``kube_minor``: the Kubernetes minor whose kube-scheduler the allocator follows."""
        self._kube_minor = kube_minor
        self._on_claim_hook = on_claim
        self.snapshot = ClusterSnapshot()
        self.allocations: dict[str, AllocationResult] = {}  # claim uid -> allocation the snapshot holds
        # one object the control plane cannot parse is left out (logged once, an Event on it); the rest goes on
        self.events = EventRecorder(client, "gpudra-control-plane")
        events = self.events
        self.slices = Informer(
            client, RESOURCE_SLICES, self._on_slice, parse=ResourceSlice.model_validate, events=events
        )
        self.claims = Informer(
            client, RESOURCE_CLAIMS, self.claim_event, parse=ResourceClaim.model_validate, events=events
        )
        self.classes = Informer(
            client, DEVICE_CLASSES, self._on_class, parse=DeviceClass.model_validate, events=events
        )
        self.templates = Informer(
            client,
            RESOURCE_CLAIM_TEMPLATES,
            on_template,
            parse=ResourceClaimTemplate.model_validate,
            events=events,
        )
        self.namespaces = Informer(client, NAMESPACES, parse=Namespace.model_validate, events=events)
        self.nodes = Informer(client, NODES, self.nodes_event, parse=Node.model_validate, events=events)
        self._nodes_seen = 0  # node events so far
        self._node_infos: dict[tuple[tuple[str, str], ...], tuple[int, list[NodeInfo]]] = {}
        self._on_pod_hook = on_pod
        self.pods = Informer(client, PODS, self._pod_event, parse=Pod.model_validate, events=events)
        self.taint_rules = Informer(
            client,
            taint_rules or device_taint_rules(),
            self._on_taint_rule,
            parse=DeviceTaintRule.model_validate,
            events=events,
        )
        self.rules: list[DeviceTaintRule] = []
        self.listeners: list[Callable[[], None]] = []
        """Called after every change of a pod, claim, slice or DeviceTaintRule (the eviction controller looks)."""
        self.changed = 0  # bumped when devices may have become available
        self._allocator: Allocator | None = None
        # claim uid -> resourceVersion of the scheduler's own write (None: the write is in flight); the claim's
        # events older than that are stale and must not undo the assumed allocation (kube-scheduler's assume cache)
        self._assumed: dict[str, int | None] = {}
        self._owned: dict[str, set[tuple[str, str]]] = {}  # owner (pod) uid -> its claims (namespace, name)

    @property
    def informers(self) -> list[Informer]:
        return [
            self.slices,
            self.claims,
            self.classes,
            self.templates,
            self.namespaces,
            self.nodes,
            self.pods,
            self.taint_rules,
        ]

    def informer(self, resource: Resource) -> Informer:
        return next(i for i in self.informers if i.resource == resource)

    def _notify(self) -> None:
        for listener in self.listeners:
            listener()

    async def _pod_event(self, kind: str, body: dict[str, Any]) -> None:
        self._notify()
        if self._on_pod_hook is not None:
            await self._on_pod_hook(kind, body)

    async def _on_slice(self, kind: str, body: dict[str, Any]) -> None:
        self._notify()
        name = body["metadata"]["name"]
        if kind == "DELETED":
            self.snapshot.remove_slice(name)
        else:
            self.snapshot.add_slice(taint_slice(self.slices.parsed(body, ResourceSlice), self.rules))
        self.changed += 1

    async def _on_taint_rule(self, kind: str, body: dict[str, Any]) -> None:
        self._notify()
        rule = DeviceTaintRule.model_validate(body)
        if kind != "DELETED" and unsupported_selector(rule):
            log.warning(
                "DeviceTaintRule selects by deviceClassName or CEL selectors (alpha in 1.34, gone in 1.35): the"
                " stand-in scheduler ignores it",
                rule=rule.metadata.name,
            )
        self.rules = [DeviceTaintRule.model_validate(b) for _, b in sorted(self.taint_rules.cache.items())]
        for slice_body in self.slices.cache.values():
            self.snapshot.add_slice(taint_slice(ResourceSlice.model_validate(slice_body), self.rules))
        self.changed += 1

    async def _on_class(self, kind: str, body: dict[str, Any]) -> None:
        self._allocator = None
        self.changed += 1

    def remember_claim(self, body: dict[str, Any]) -> None:
        """Put a claim the control plane wrote into the cache (its watch event may come later)."""
        meta = body["metadata"]
        self.claims.cache[(meta["namespace"], meta["name"])] = body
        self._index_owners(meta, add=True)

    def owned_claims(self, owner_uid: str) -> list[dict[str, Any]]:
        """The cached claims that name ``owner_uid`` among their owners (a pod's, without scanning all)."""
        keys = self._owned.get(owner_uid, set())
        return [claim for key in sorted(keys) if (claim := self.claims.cache.get(key)) is not None]

    def _index_owners(self, meta: dict[str, Any], *, add: bool) -> None:
        key = (meta.get("namespace", ""), meta["name"])
        for owner in meta.get("ownerReferences") or []:
            if add:
                self._owned.setdefault(owner.get("uid", ""), set()).add(key)
            elif (keys := self._owned.get(owner.get("uid", ""))) is not None:
                keys.discard(key)
                if not keys:
                    del self._owned[owner.get("uid", "")]

    async def claim_event(self, kind: str, body: dict[str, Any]) -> None:
        self._notify()
        uid = body["metadata"]["uid"]
        self._index_owners(body["metadata"], add=kind != "DELETED")
        if kind == "DELETED":
            self._assumed.pop(uid, None)
        elif self._stale(uid, body):
            return
        raw = (body.get("status") or {}).get("allocation")
        new = None if kind == "DELETED" or raw is None else AllocationResult.model_validate(raw)
        self.record_allocation(uid, new)
        if self._on_claim_hook is not None:
            await self._on_claim_hook(kind, body)

    def record_allocation(self, uid: str, allocation: AllocationResult | None) -> None:
        """Make the snapshot hold ``allocation`` for the claim (None: nothing)."""
        old = self.allocations.get(uid)
        if old == allocation:
            return
        if old is not None:
            self.snapshot.mark_free(old)
            self.changed += 1
        if allocation is None:
            self.allocations.pop(uid, None)
        else:
            self.snapshot.mark_allocated(allocation)
            self.allocations[uid] = allocation

    def assume(self, uid: str, allocation: AllocationResult) -> None:
        """The scheduler allocated the claim and writes it in the background: the snapshot holds the allocation
        from now on, whatever older events of the claim still arrive."""
        self._assumed[uid] = None
        self.record_allocation(uid, allocation)

    def written(self, uid: str, body: dict[str, Any]) -> None:
        """The scheduler's write of the claim returned ``body``: events from that version on count again."""
        if uid in self._assumed:
            self._assumed[uid] = resource_version(body)

    def unassume(self, uid: str, body: dict[str, Any] | None) -> None:
        """The write failed: the snapshot holds what the claim (``body``, None when gone) says again."""
        self._assumed.pop(uid, None)
        raw = ((body or {}).get("status") or {}).get("allocation")
        self.record_allocation(uid, None if raw is None else AllocationResult.model_validate(raw))

    def writing(self, uid: str) -> bool:
        """Whether the scheduler's write of the claim's allocation is still in flight."""
        return uid in self._assumed and self._assumed[uid] is None

    def _stale(self, uid: str, body: dict[str, Any]) -> bool:
        if uid not in self._assumed:
            return False
        written = self._assumed[uid]
        if written is None or resource_version(body) < written:
            return True
        del self._assumed[uid]
        return False

    def holders(self) -> dict[DeviceId, str]:
        """Which claim (namespace/name) holds each allocated device, for explanations (built on demand)."""
        names = {
            body["metadata"].get("uid"): f"{namespace}/{name}"
            for (namespace, name), body in self.claims.cache.items()
        }
        out: dict[DeviceId, str] = {}
        for uid, allocation in self.allocations.items():
            for r in (allocation.devices.results or []) if allocation.devices else []:
                out[DeviceId(r.driver, r.pool, r.device)] = names.get(uid, "another claim")
        return out

    def allocator(self) -> Allocator:
        if self._allocator is None:
            classes = [DeviceClass.model_validate(b) for b in self.classes.cache.values()]
            self._allocator = Allocator(self.snapshot, classes, kube_minor=self._kube_minor)
        labels = {
            ns["metadata"]["name"]: ns["metadata"].get("labels") or {}
            for ns in self.namespaces.cache.values()
        }
        self._allocator.namespace_labels = labels
        return self._allocator

    async def nodes_event(self, kind: str, body: dict[str, Any]) -> None:
        self._nodes_seen += 1

    def node_infos(self, node_selector: dict[str, str] | None = None) -> list[NodeInfo]:
        """The schedulable nodes (matching ``node_selector``) in name order: the same list object while no node
        changed, which lets the allocator resume a first-fit scan where the previous pod of the same shape
        left off instead of scanning every full node again (do not modify it)."""
        key = tuple(sorted((node_selector or {}).items()))
        cached = self._node_infos.get(key)
        if cached is not None and cached[0] == self._nodes_seen:
            return cached[1]
        infos = []
        for body in sorted(self.nodes.cache.values(), key=lambda n: n["metadata"]["name"]):
            labels = body["metadata"].get("labels") or {}
            if node_selector and any(labels.get(k) != v for k, v in node_selector.items()):
                continue
            infos.append(NodeInfo(body["metadata"]["name"], labels))
        if len(self._node_infos) > 64:
            self._node_infos.clear()
        self._node_infos[key] = (self._nodes_seen, infos)
        return infos
