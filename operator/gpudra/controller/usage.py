"""The controller's allocation metrics: per-device series with dcgm-exporter's DRA labels, and allocated vs
published GPU resources per node, kept from the slice and claim events it already watches."""

from __future__ import annotations

import asyncio

from gpudra.api.dra import Counter, Device, ResourceClaim, ResourceSlice
from gpudra.metrics import Metrics
from gpudra.planning.attribution import (
    USAGE_RESOURCES,
    DeviceKey,
    allocation_series,
    claim_usage,
    node_usage,
    slice_counter_sets,
    slice_devices,
)


class Attribution:
    """A claim's change updates its own series and what it takes of its nodes; a slice's change (rare) recomputes
    everything, since a claim may arrive before its devices' slice. The gauges of the nodes whose numbers changed
    are written every ``refresh_seconds``."""

    def __init__(self, metrics: Metrics, *, refresh_seconds: float = 2.0) -> None:
        self._metrics = metrics
        self._refresh = refresh_seconds
        self._slices: dict[str, dict[DeviceKey, Device]] = {}
        self._devices: dict[DeviceKey, Device] = {}
        self._slice_sets: dict[str, dict[DeviceKey, dict[str, Counter]]] = {}
        self._counter_sets: dict[DeviceKey, dict[str, Counter]] = {}
        self._claims: dict[str, ResourceClaim] = {}
        self._series: dict[str, list[tuple[str, ...]]] = {}
        self._taken: dict[str, dict[str, dict[str, float]]] = {}  # claim uid -> node -> resource -> amount
        self._allocated: dict[str, dict[str, float]] = {}  # node -> resource -> amount
        self._capacity: dict[str, dict[str, float]] = {}
        self._nodes: set[str] = set()
        self._changed_nodes: set[str] = set()
        self._written: dict[str, dict[str, float]] = {}  # node -> resource -> its allocated gauge's value
        self._slices_changed = False

    def slice_changed(self, name: str, slice_: ResourceSlice | None) -> None:
        for key in self._slices.pop(name, {}):
            self._devices.pop(key, None)
        for key in self._slice_sets.pop(name, {}):
            self._counter_sets.pop(key, None)
        if slice_ is not None:
            self._slices[name] = slice_devices(slice_)
            self._devices.update(self._slices[name])
            self._slice_sets[name] = slice_counter_sets(slice_)
            self._counter_sets.update(self._slice_sets[name])
        self._slices_changed = True

    def claim_changed(self, uid: str, claim: ResourceClaim | None) -> None:
        if claim is None:
            self._claims.pop(uid, None)
        else:
            self._claims[uid] = claim
        self._set_series(uid, claim)
        self._take(uid, claim_usage(claim, self._devices) if claim is not None else {})

    def _take(self, uid: str, taken: dict[str, dict[str, float]]) -> None:
        """Record what the claim takes of each node now, instead of what it took."""
        before = self._taken.pop(uid, {})
        if taken:
            self._taken[uid] = taken
        for sign, usage in ((-1.0, before), (1.0, taken)):
            for node, amounts in usage.items():
                totals = self._allocated.setdefault(node, dict.fromkeys(amounts, 0.0))
                for resource, amount in amounts.items():
                    totals[resource] = totals.get(resource, 0.0) + sign * amount
                self._changed_nodes.add(node)

    def _set_series(self, uid: str, claim: ResourceClaim | None) -> None:
        series = self._metrics.device_allocated  # a series held by two claims stays until both let go
        new = allocation_series(claim, self._devices) if claim is not None else []
        old = self._series.pop(uid, [])
        if old != new:  # a claim's change that keeps its devices and pod (most do) writes nothing
            for labels in set(old) - set(new):
                series.release(labels)
            for labels in set(new) - set(old):
                series.hold(labels)
        if new:
            self._series[uid] = new

    def refresh(self) -> None:
        """Write the per-node gauges that changed; after a slice change, recompute everything first."""
        if self._slices_changed:
            self._slices_changed = False
            for uid, claim in self._claims.items():
                self._set_series(uid, claim)
            allocated, self._capacity = node_usage(
                list(self._claims.values()), self._devices, self._counter_sets
            )
            self._taken = {uid: claim_usage(c, self._devices) for uid, c in self._claims.items()}
            self._taken = {uid: taken for uid, taken in self._taken.items() if taken}
            self._allocated = allocated
            nodes = set(self._capacity) | set(allocated)
            for node in self._nodes - nodes:
                self._written.pop(node, None)
                for resource in USAGE_RESOURCES:
                    self._metrics.node_allocated.remove(node, resource)
                    self._metrics.node_capacity.remove(node, resource)
            self._changed_nodes = nodes
            self._nodes = nodes
            for node in nodes:
                for resource, amount in self._capacity.get(node, {}).items():
                    self._metrics.node_capacity.labels(node, resource).set(amount)
        for node in self._changed_nodes & self._nodes:
            totals = self._allocated.get(node, {})
            written = self._written.setdefault(node, {})
            for resource in self._capacity.get(node, {}):
                amount = totals.get(resource, 0.0)
                if written.get(resource) != amount:  # a claim that came and went since: nothing to write
                    written[resource] = amount
                    self._metrics.node_allocated.labels(node, resource).set(amount)
        self._changed_nodes = set()

    async def refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self._refresh)
            if self._slices_changed or self._changed_nodes:
                self.refresh()
