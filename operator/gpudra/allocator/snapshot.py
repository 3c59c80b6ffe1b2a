"""The cluster's devices and what is allocated, as an incremental index kept across pods.

Kubernetes rebuilds its pool view from every slice for each pod (O(cluster) per pod, kubernetes#136588). Here
a :class:`ClusterSnapshot` is updated in place (``add_slice`` / ``remove_slice`` / ``mark_allocated`` /
``mark_free``) and answers "which pools can this node reach" from a per-node index: O(that node's slices) plus
the few pools whose slices use nodeSelector / allNodes / perDeviceNodeSelection or carry shared counters.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING

from gpudra.allocator.cel.celview import Schema
from gpudra.allocator.index import DeviceIndex
from gpudra.allocator.pools import (
    DeviceEntry,
    DeviceId,
    NodeInfo,
    PoolKey,
    PoolView,
    build_pool,
    node_matches,
    node_view,
)
from gpudra.api.dra import AllocationResult, DeviceRequestAllocationResult, ResourceSlice
from gpudra.api.quantity import parse_quantity

if TYPE_CHECKING:
    from gpudra.allocator.requests import Selection


@dataclass(slots=True)
class NodePools:
    """The pools reachable from one node: usable ones (sorted as Kubernetes does) with the devices the node
    can use, plus the incomplete and invalid ones (for "All" requests and explanations)."""

    usable: list[tuple[PoolView, list[DeviceEntry]]]
    incomplete: list[PoolKey]
    invalid: list[tuple[PoolKey, str]]
    visible: list[DeviceEntry] = field(default_factory=list)
    """Every device of the usable pools' slices that reach the node, in order, including devices of a
    perDeviceNodeSelection slice that belong to other nodes: Kubernetes evaluates selectors on those too
    (before it checks the device's node), so a selector failing on one fails the allocation."""
    elsewhere: set[int] = field(default_factory=set)
    """ids of the visible devices the node cannot use."""
    views: dict[PoolKey, PoolView] = field(default_factory=dict)
    """The usable pools as the node sees them (see pools.node_view), for their counters."""
    selections: dict[Hashable, Selection] = field(default_factory=dict)
    """What the node's devices are for each shape of request seen (``requests.Selection``), kept as long as
    this object: until the node's slices change."""


@dataclass(frozen=True, slots=True)
class ClusterBounds:
    """Upper bounds over every node, for a cluster whose pools are all node-local: what no node can exceed,
    so that a claim asking for more is answered without visiting the nodes one by one."""

    devices: int
    """The most devices one node has (``node_counts``' total)."""
    shared: dict[str, int]
    """Per attribute: the most of one node's devices that share one value of it (``node_shape``)."""
    schemas: frozenset[Schema]
    """The schemas of every device."""
    multi: bool
    """Whether some device allows multiple allocations (then counting devices bounds nothing)."""


FREED_KEPT = 65_536
"""The most entries ``ClusterSnapshot.freed`` keeps (half a megabyte of references)."""


class ClusterSnapshot:
    """Slices, pools and allocation state. Not thread-safe; one owner mutates it."""

    def __init__(self, slices: Iterable[ResourceSlice] = ()) -> None:
        self._slices: dict[str, ResourceSlice] = {}
        self._pool_slices: dict[PoolKey, dict[str, ResourceSlice]] = {}
        self._pools: dict[PoolKey, PoolView] = {}
        self._dirty: set[PoolKey] = set()
        self._by_node: dict[str, set[PoolKey]] = {}
        self._pool_nodes: dict[PoolKey, set[str]] = {}
        self._global: dict[PoolKey, int] = {}
        self._in_use: set[DeviceId] = set()
        self._shares: dict[DeviceId, dict[str, dict[str, Fraction]]] = {}
        self._available: dict[PoolKey, tuple[dict[tuple[str, str], Fraction], bool]] = {}
        self._node_cache: dict[str, tuple[int, NodeInfo, NodePools]] = {}
        self._by_pool_in_use: dict[PoolKey, set[DeviceId]] = {}
        self._node_counts: dict[str, tuple[int, int, int, bool]] = {}
        self._shapes: dict[str, tuple[int, tuple[dict[str, int], frozenset[Schema]]]] = {}
        self.index = DeviceIndex()
        """The devices of every built pool, grouped by schema with their attribute values counted (``refresh``
        builds them all)."""
        self.version = 0
        self.freed: list[str | None] = []
        """Nodes that got devices back, in order (None: unknown node); lets first-fit scans resume safely. Only
        the newest entries are kept: ``freed[0]`` is entry number ``freed_dropped`` of the whole log."""
        self.freed_dropped = 0
        self._names: tuple[int, list[str]] = (-1, [])
        self._bounds: tuple[int, ClusterBounds | None] = (-1, None)
        self._keys: tuple[int, list[PoolKey]] = (-1, [])
        """Bumped on every slice change; caches keyed on it stay valid while allocations change."""
        self._anon = 0
        for s in slices:
            self.add_slice(s)
        self.refresh()  # ingest what was given now: pools, CEL views and the index, not on the first claim
        self.bounds()

    # ------------------------------------------------------------ slices

    def add_slice(self, slice_: ResourceSlice) -> None:
        """Add or replace (by metadata.name) one slice."""
        name = slice_.metadata.name
        if not name:
            self._anon += 1
            name = f"<unnamed-{self._anon}>"
            slice_ = slice_.model_copy(update={"metadata": slice_.metadata.model_copy(update={"name": name})})
        if name in self._slices:
            self.remove_slice(name)
        key = PoolKey(slice_.spec.driver, slice_.spec.pool.name)
        self._slices[name] = slice_
        self._pool_slices.setdefault(key, {})[name] = slice_
        self._index(key, slice_, +1)
        self._touch(key)

    def remove_slice(self, name: str) -> None:
        slice_ = self._slices.pop(name, None)
        if slice_ is None:
            return
        key = PoolKey(slice_.spec.driver, slice_.spec.pool.name)
        pool = self._pool_slices.get(key, {})
        pool.pop(name, None)
        if not pool:
            self._pool_slices.pop(key, None)
        self._index(key, slice_, -1)
        self._touch(key)

    def _index(self, key: PoolKey, slice_: ResourceSlice, delta: int) -> None:
        spec = slice_.spec
        # Slices without devices count too: Kubernetes judges a pool incomplete (an All request fails) from
        # every slice that reaches the node, counters-only and empty ones included.
        if spec.node_name:
            nodes = self._pool_nodes.setdefault(key, set())
            if delta > 0:
                nodes.add(spec.node_name)
                self._by_node.setdefault(spec.node_name, set()).add(key)
            elif not any(s.spec.node_name == spec.node_name for s in self._pool_slices.get(key, {}).values()):
                nodes.discard(spec.node_name)
                self._by_node.get(spec.node_name, set()).discard(key)
        else:
            count = self._global.get(key, 0) + delta
            if count > 0:
                self._global[key] = count
            else:
                self._global.pop(key, None)

    def _touch(self, key: PoolKey) -> None:
        self._dirty.add(key)
        self._available.pop(key, None)
        self.version += 1

    def pool(self, key: PoolKey) -> PoolView | None:
        if key in self._dirty:
            self._dirty.discard(key)
            previous = self._pools.get(key)
            view = build_pool(key, self._pool_slices.get(key, {}).values(), previous)
            if view is None:
                self._pools.pop(key, None)
            else:
                self._pools[key] = view
            self._reindex(previous, view)
        return self._pools.get(key)

    def _reindex(self, previous: PoolView | None, view: PoolView | None) -> None:
        """Keep the device index in step with a rebuilt pool (entries of unchanged devices are the same
        objects and stay)."""
        kept = {id(e) for e in view.entries} if view is not None else set()
        if previous is not None:
            self.index.remove(e for e in previous.entries if id(e) not in kept)
        if view is not None:
            before = {id(e) for e in previous.entries} if previous is not None else set()
            self.index.add(e for e in view.entries if id(e) not in before)

    def refresh(self) -> None:
        """Build every pool that changed, so that ``index`` covers every device."""
        for key in list(self._dirty):
            self.pool(key)

    def pools(self) -> list[PoolView]:
        return list(self.each_pool())

    def each_pool(self) -> Iterator[PoolView]:
        """The pools by key, each built when reached (a caller that stops early builds no more)."""
        if self._keys[0] != self.version:
            self._keys = (self.version, sorted(set(self._pool_slices) | set(self._pools)))
        for key in self._keys[1]:
            view = self.pool(key)
            if view is not None:
                yield view

    def node_names(self) -> list[str]:
        """Names of nodes that have node-local slices (sorted; cached per slice version)."""
        if self._names[0] != self.version:
            self._names = (self.version, sorted(n for n, keys in self._by_node.items() if keys))
        return self._names[1]

    def node_pools(self, node: NodeInfo) -> NodePools:
        """The pools reachable from ``node`` in Kubernetes' order (driver, pool name; pools whose devices have
        binding conditions last)."""
        cached = self._node_cache.get(node.name)
        if cached is not None and cached[0] == self.version and (cached[1] is node or cached[1] == node):
            return cached[2]
        keys = set(self._by_node.get(node.name, ())) | set(self._global)
        usable: list[tuple[PoolView, list[DeviceEntry]]] = []
        incomplete: list[PoolKey] = []
        invalid: list[tuple[PoolKey, str]] = []
        elsewhere: dict[PoolKey, list[DeviceEntry]] = {}
        for key in sorted(keys):
            whole = self.pool(key)
            view = (
                None if whole is None else node_view(node, key, list(self._pool_slices[key].values()), whole)
            )
            if view is None:
                continue
            entries = [
                e for e in view.entries if node_matches(node, e.node_name, e.all_nodes, e.node_selector)
            ]
            if not view.complete:
                incomplete.append(key)
            elif view.invalid_reason is not None:
                invalid.append((key, view.invalid_reason))
            elif entries:
                usable.append((view, entries))
                if len(entries) < len(view.entries):
                    slices = {e.slice_name for e in entries}
                    elsewhere[key] = [e for e in view.entries if e.slice_name in slices]
        usable.sort(key=lambda pe: pe[0].has_binding_conditions)
        result = NodePools(usable, incomplete, invalid, views={v.key: v for v, _ in usable})
        for view, entries in usable:
            shown = elsewhere.get(view.key, entries)
            result.visible += shown
            if shown is not entries:
                mine = {id(e) for e in entries}
                result.elsewhere.update(id(e) for e in shown if id(e) not in mine)
        self._node_cache[node.name] = (self.version, node, result)
        return result

    # ------------------------------------------------------------ allocation state

    def in_use(self, device: DeviceId) -> bool:
        return device in self._in_use

    def not_in_use(self, entries: list[DeviceEntry]) -> list[DeviceEntry]:
        in_use = self._in_use
        return [e for e in entries if e.id not in in_use]

    def shares(self, device: DeviceId) -> dict[str, dict[str, Fraction]]:
        return self._shares.get(device, {})

    def consumed_capacity(self, device: DeviceId) -> dict[str, Fraction]:
        total: dict[str, Fraction] = {}
        for consumed in self._shares.get(device, {}).values():
            for name, value in consumed.items():
                total[name] = total.get(name, Fraction(0)) + value
        return total

    def node_counts(self, node: str) -> tuple[int, int, bool]:
        """(devices, devices not in use, loose) of a node's node-local pools, cached and kept up to date by
        allocation changes. ``loose`` is True when counting cannot bound the search (multi-allocatable
        devices, pools shared between nodes)."""
        cached = self._node_counts.get(node)
        if cached is not None and cached[0] == self.version:
            return cached[1], cached[2], cached[3]
        total = free = 0
        loose = bool(self._global)
        for key in self._by_node.get(node, ()):
            view = self.pool(key)
            if view is None:
                continue
            total += len(view.entries)
            free += len(view.entries)
            loose = loose or view.has_multi
            busy = self._by_pool_in_use.get(key)
            if busy:
                free -= sum(1 for d in busy if d in self._in_use and d in view.ids)
        self._node_counts[node] = (self.version, total, free, loose)
        return total, free, loose

    def node_shape(self, node: str) -> tuple[dict[str, int], frozenset[Schema]] | None:
        """For a node whose pools are all its own: per attribute the most of its devices that share one value
        (summed over its pools, an upper bound), and the schemas of its devices. None when pools shared with
        other nodes reach it (then nothing bounds it). Read only: a node with one pool gets the pool's own."""
        if self._global:
            return None
        cached = self._shapes.get(node)
        if cached is not None and cached[0] == self.version:
            return cached[1]
        keys = self._by_node.get(node, ())
        if len(keys) == 1:
            only = self.pool(next(iter(keys)))
            if only is not None:
                self._shapes[node] = (self.version, (only.multiplicity, only.schemas))
                return only.multiplicity, only.schemas
        most: dict[str, int] = {}
        schemas: frozenset[Schema] = frozenset()
        for key in keys:
            view = self.pool(key)
            if view is None:
                continue
            for name, count in view.multiplicity.items():
                most[name] = most.get(name, 0) + count
            schemas |= view.schemas
        self._shapes[node] = (self.version, (most, schemas))
        return most, schemas

    def bounds(self) -> ClusterBounds | None:
        """The :class:`ClusterBounds` of the cluster, or None when some pool is not node-local (then no bound
        holds for every node). Built once per slice version: at ingestion, and after slices change on first
        use; allocations do not change them."""
        if self._bounds[0] == self.version:
            return self._bounds[1]
        bounds: ClusterBounds | None = None
        if not self._global:
            self.refresh()
            devices, multi = 0, False
            shared: dict[str, int] = {}
            schemas: set[Schema] = set()
            for node, keys in self._by_node.items():
                views = [v for v in (self._pools.get(k) for k in keys) if v is not None]
                devices = max(devices, sum(len(v.entries) for v in views))
                multi = multi or any(v.has_multi for v in views)
                found = self.node_shape(node)
                if found is not None:
                    for name, count in found[0].items():
                        if count > shared.get(name, 0):
                            shared[name] = count
                    schemas.update(found[1])
            bounds = ClusterBounds(devices, shared, frozenset(schemas), multi)
        self._bounds = (self.version, bounds)
        return bounds

    @property
    def freed_total(self) -> int:
        """How many frees the log has recorded since the snapshot was made (dropped entries included)."""
        return self.freed_dropped + len(self.freed)

    def _note_freed(self, device: DeviceId) -> None:
        """Record that the device's node got something back (for first-fit scans resuming past it). A scheduler
        frees devices for as long as it runs: past ``FREED_KEPT`` entries the older half is dropped, and a scan
        remembered from before them looks at every node again."""
        view = self._pools.get(PoolKey(device.driver, device.pool))
        self.freed.append(view.node_local if view is not None else None)
        if len(self.freed) > FREED_KEPT:
            half = len(self.freed) // 2
            del self.freed[:half]
            self.freed_dropped += half

    def _count_free(self, key: PoolKey, device: DeviceId, delta: int) -> None:
        """Adjust the cached free count of the device's node by ``delta`` instead of counting again."""
        view = self._pools.get(key)
        node = view.node_local if view is not None else None
        if view is None or node is None:
            return
        cached = self._node_counts.get(node)
        if cached is None:
            return
        if cached[0] != self.version or device not in view.ids:
            del self._node_counts[node]
            return
        self._node_counts[node] = (cached[0], cached[1], cached[2] + delta, cached[3])

    def allocate_device(self, device: DeviceId) -> None:
        key = PoolKey(device.driver, device.pool)
        if device not in self._in_use:
            self._count_free(key, device, -1)
            self._in_use.add(device)
        busy = self._by_pool_in_use.get(key)
        if busy is None:
            busy = self._by_pool_in_use[key] = set()
        busy.add(device)
        if self._available:
            self._available.pop(key, None)

    def free_device(self, device: DeviceId) -> None:
        self._note_freed(device)
        key = PoolKey(device.driver, device.pool)
        if device in self._in_use:
            self._count_free(key, device, +1)
        self._in_use.discard(device)
        self._by_pool_in_use.get(key, set()).discard(device)
        self._available.pop(key, None)

    def add_share(self, device: DeviceId, share_id: str, consumed: dict[str, Fraction]) -> None:
        self._shares.setdefault(device, {})[share_id] = dict(consumed)
        self._by_pool_in_use.setdefault(PoolKey(device.driver, device.pool), set()).add(device)
        self._available.pop(PoolKey(device.driver, device.pool), None)

    def remove_share(self, device: DeviceId, share_id: str) -> None:
        self._note_freed(device)
        shares = self._shares.get(device)
        if shares is not None:
            shares.pop(share_id, None)
            if not shares:
                del self._shares[device]
                if device not in self._in_use:
                    self._by_pool_in_use.get(PoolKey(device.driver, device.pool), set()).discard(device)
        self._available.pop(PoolKey(device.driver, device.pool), None)

    def mark_allocated(self, allocation: AllocationResult | Iterable[DeviceRequestAllocationResult]) -> None:
        """Record a claim's allocation (as written in status.allocation). adminAccess results take nothing."""
        for r in _results(allocation):
            if r.admin_access:
                continue
            device = DeviceId(r.driver, r.pool, r.device)
            if r.share_id:
                consumed = {k: parse_quantity(v) for k, v in (r.consumed_capacity or {}).items()}
                self.add_share(device, r.share_id, consumed)
            else:
                self.allocate_device(device)

    def mark_free(self, allocation: AllocationResult | Iterable[DeviceRequestAllocationResult]) -> None:
        """Undo :meth:`mark_allocated` for a deallocated claim."""
        for r in _results(allocation):
            if r.admin_access:
                continue
            device = DeviceId(r.driver, r.pool, r.device)
            if r.share_id:
                self.remove_share(device, r.share_id)
            else:
                self.free_device(device)

    def available_counters(self, pool: PoolView) -> dict[tuple[str, str], Fraction]:
        """Counter values of the pool minus what allocated devices consume (a multi-allocatable device counts
        once, however many shares it has). May go negative; negative means exhausted."""
        return self._counter_state(pool)[0]

    def overdrawn(self, pool: PoolView) -> bool:
        """Whether allocated devices consume more of some counter of the pool than it has (its counters were
        republished lower): Kubernetes then allocates no counter-consuming device of the pool at all."""
        return self._counter_state(pool)[1]

    def _counter_state(self, pool: PoolView) -> tuple[dict[tuple[str, str], Fraction], bool]:
        shared = (
            self._pools.get(pool.key) is pool
        )  # a node's own view of a pool (pools.node_view) is not cached
        cached = self._available.get(pool.key) if shared else None
        if cached is not None:
            return cached
        available = {(s, c): v for s, counters in pool.counter_sets.items() for c, v in counters.items()}
        busy = self._by_pool_in_use.get(pool.key, set())
        if busy:
            for entry in itertools.chain(pool.entries, pool.elsewhere):
                if entry.consumes and (entry.id in self._in_use or entry.id in self._shares):
                    for set_name, counter, value in entry.consumes:
                        k = (set_name, counter)
                        if k in available:
                            available[k] -= value
        state = (available, any(v < 0 for v in available.values()))
        if shared:
            self._available[pool.key] = state
        return state


def _results(
    allocation: AllocationResult | Iterable[DeviceRequestAllocationResult],
) -> Iterable[DeviceRequestAllocationResult]:
    if isinstance(allocation, AllocationResult):
        return (allocation.devices.results or []) if allocation.devices else []
    return allocation
