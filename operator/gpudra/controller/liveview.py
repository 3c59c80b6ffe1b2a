"""The cluster as the controller's informers see it, kept in step with each change they hand it: the allocator's
snapshot (every slice, every claim's allocation), which claim holds each device, the DeviceClasses, the nodes and
the namespaces' labels; and which nodes kube-scheduler's node filters keep a waiting pod off. A round of
explanations reads it as a :class:`~gpudra.controller.explaining.ClusterView` without listing anything: at 1,000
nodes a listed view cost about 2 s of CPU and its own copy of every slice and claim per round
(docs/performance.md).

The allocator is built again only when a DeviceClass changes; slices and allocations change its snapshot in place,
as kube-scheduler's allocator cache does (the stand-in scheduler's ``cluster.controlplane.state`` keeps its own the
same way).
"""

from __future__ import annotations

from typing import Any

from gpudra.allocator import DEFAULT_KUBE_MINOR, Allocator, ClusterSnapshot, DeviceId, NodeInfo
from gpudra.api.core import Node, Pod
from gpudra.api.dra import AllocationResult, DeviceClass, ResourceClaim, ResourceSlice
from gpudra.controller.explaining import ClusterView
from gpudra.planning.migmodels import FleetMigModels
from gpudra.planning.podnodes import filters_key, filters_of, kept_off

KEPT_OFF_LIMIT = 256
"""How many pods' node filters' answers are kept (all are dropped past it: pods each pinned to a node of their own,
waiting at once, would keep a node list apiece)."""


class LiveView:
    def __init__(self, kube_minor: int = DEFAULT_KUBE_MINOR) -> None:
        self.kube_minor = kube_minor
        self.snapshot = ClusterSnapshot()
        self._allocations: dict[str, tuple[str, AllocationResult]] = {}  # claim uid -> (its name, allocation)
        self._holders: dict[DeviceId, str] = {}
        self._classes: dict[str, DeviceClass] = {}
        self._nodes: dict[str, Node] = {}
        self._namespace_labels: dict[str, dict[str, str]] = {}
        self._allocator: Allocator | None = None
        self._node_view: tuple[list[NodeInfo], FleetMigModels] | None = None
        self._node_wires: dict[str, dict[str, Any]] = {}
        """The nodes' wire objects, made as :meth:`kept_off` first needs each."""
        self._kept_off: dict[str, dict[str, str]] = {}
        """Pods' node filters (JSON) -> what keeps such a pod off each node, while no node changes."""

    def slice_changed(self, name: str, slice_: ResourceSlice | None) -> None:
        """A slice changed (None: deleted, or it does not parse)."""
        if slice_ is None:
            self.snapshot.remove_slice(name)
        else:
            self.snapshot.add_slice(slice_)

    def claim_changed(self, uid: str, claim: ResourceClaim | None) -> None:
        """A claim changed (None: deleted, or it does not parse): the snapshot holds its allocation, if any."""
        allocation = claim.allocation if claim is not None else None
        old = self._allocations.get(uid)
        if old is not None and old[1] == allocation:
            return
        if old is not None:
            self.snapshot.mark_free(old[1])
            for device in _devices(old[1]):
                if self._holders.get(device) == old[0]:
                    del self._holders[device]
            del self._allocations[uid]
        if claim is not None and allocation is not None:
            name = claim.metadata.namespaced_name
            self.snapshot.mark_allocated(allocation)
            self._allocations[uid] = (name, allocation)
            for device in _devices(allocation):
                self._holders[device] = name

    def class_changed(self, name: str, device_class: DeviceClass | None) -> None:
        if device_class is None:
            self._classes.pop(name, None)
        else:
            self._classes[name] = device_class
        self._allocator = None

    def node_changed(self, name: str, node: Node | None) -> None:
        if node is None:
            self._nodes.pop(name, None)
        else:
            self._nodes[name] = node
        self._node_view = None
        self._node_wires.pop(name, None)
        self._kept_off.clear()

    def kept_off(self, pod: Pod) -> dict[str, str]:
        """Node -> what keeps the pod (not bound yet) off it (``gpudra.planning.podnodes``), over every node:
        found once for pods whose node filters are alike, while no node changes."""
        spec = pod.spec  # these three are kept in their wire form
        filters = filters_of(
            {
                "spec": {
                    "nodeSelector": spec.node_selector,
                    "affinity": spec.affinity,
                    "tolerations": spec.tolerations,
                }
            }
        )
        key = filters_key(filters)
        known = self._kept_off.get(key)
        if known is None:
            if len(self._kept_off) >= KEPT_OFF_LIMIT:
                self._kept_off.clear()
            known = self._kept_off[key] = kept_off(filters, (self._wire(n) for n in self._nodes))
        return known

    def _wire(self, name: str) -> dict[str, Any]:
        wire = self._node_wires.get(name)
        if wire is None:
            wire = self._node_wires[name] = self._nodes[name].to_wire()
        return wire

    def namespace_changed(self, name: str, labels: dict[str, str] | None) -> None:
        if labels is None:
            self._namespace_labels.pop(name, None)
        else:
            self._namespace_labels[name] = labels
        if self._allocator is not None:
            self._allocator.namespace_labels = dict(self._namespace_labels)

    def warm(self) -> None:
        """Build now what the first round would otherwise build: the snapshot's pools and device index from the
        slices handed in (about 0.5 s of CPU at 1,000 nodes). The controller does it once its informers have
        listed, before it says it is ready, so that the first explanations come without that wait, and the
        standalone process's frozen start-up heap (``gpudra.heap``) holds them."""
        self.snapshot.refresh()

    def view(self, pending: list[ResourceClaim]) -> ClusterView:
        """The view a round explains ``pending`` (the unallocated claims) over. It shares this object's state:
        use it before the next change is handed in."""
        if self._allocator is None:
            self._allocator = Allocator(
                self.snapshot,
                list(self._classes.values()),
                namespace_labels=self._namespace_labels,
                kube_minor=self.kube_minor,
            )
        if self._node_view is None:
            nodes = self._nodes.values()
            infos = sorted(
                (NodeInfo(n.metadata.name or "", n.metadata.labels or {}) for n in nodes), key=_name
            )
            self._node_view = (infos, FleetMigModels.of_nodes(nodes))
        infos, mig_models = self._node_view
        return ClusterView(self._allocator, infos, pending, self._holders, mig_models)


def _name(info: NodeInfo) -> str:
    return info.name


def _devices(allocation: AllocationResult) -> list[DeviceId]:
    return [DeviceId(r.driver, r.pool, r.device) for r in allocation.results]
