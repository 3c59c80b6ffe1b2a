"""The controller's allocation metrics: per-device series with dcgm-exporter's DRA labels, and allocated vs
published GPU resources per node, kept from the slice and claim events it already watches."""

from __future__ import annotations

import asyncio

from gpudra.api.dra import Counter, Device, ResourceClaim, ResourceSlice
from gpudra.metrics import Metrics
from gpudra.planning.attribution import (
    DeviceKey,
    allocation_series,
    node_usage,
    slice_counter_sets,
    slice_devices,
)


class Attribution:
    def __init__(self, metrics: Metrics, *, refresh_seconds: float = 2.0) -> None:
        self._metrics = metrics
        self._refresh = refresh_seconds
        self._slices: dict[str, dict[DeviceKey, Device]] = {}
        self._devices: dict[DeviceKey, Device] = {}
        self._slice_sets: dict[str, dict[DeviceKey, dict[str, Counter]]] = {}
        self._counter_sets: dict[DeviceKey, dict[str, Counter]] = {}
        self._claims: dict[str, ResourceClaim] = {}
        self._series: dict[str, list[tuple[str, ...]]] = {}
        self._nodes: set[str] = set()
        self._dirty = False

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
        self._dirty = True

    def claim_changed(self, uid: str, claim: ResourceClaim | None) -> None:
        if claim is None:
            self._claims.pop(uid, None)
        else:
            self._claims[uid] = claim
        self._set_series(uid, claim)
        self._dirty = True

    def _set_series(self, uid: str, claim: ResourceClaim | None) -> None:
        gauge = self._metrics.device_allocated
        new = allocation_series(claim, self._devices) if claim is not None else []
        old = self._series.pop(uid, [])
        for labels in set(old) - set(new):
            gauge.remove(*labels)
        for labels in new:
            gauge.labels(*labels).set(1)
        if new:
            self._series[uid] = new

    def refresh(self) -> None:
        """Recompute what depends on both slices and claims (a claim may arrive before its devices' slice)."""
        for uid, claim in self._claims.items():
            self._set_series(uid, claim)
        allocated, capacity = node_usage(list(self._claims.values()), self._devices, self._counter_sets)
        nodes = set(capacity) | set(allocated)
        for node in self._nodes - nodes:
            for resource in ("devices", "memory", "multiprocessors", "memory_slices"):
                self._metrics.node_allocated.remove(node, resource)
                self._metrics.node_capacity.remove(node, resource)
        for node in nodes:
            for resource, amount in capacity.get(node, {}).items():
                self._metrics.node_capacity.labels(node, resource).set(amount)
                self._metrics.node_allocated.labels(node, resource).set(
                    allocated.get(node, {}).get(resource, 0.0)
                )
        self._nodes = nodes
        self._dirty = False

    async def refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self._refresh)
            if self._dirty:
                self.refresh()
