"""The cluster's devices grouped by schema, with counts of every attribute value, kept as pools are built.

Devices with the same schema (driver, attribute names and kinds, capacity names; ``celview.schema_of``) are one
:class:`Group`: a fleet of 5,000 H100 nodes is one group of 40,000 devices, plus one per MIG layout or other
driver. Per group the index counts how many devices carry each value of each attribute. ``celfacts`` reads a
selector against a group from these counts alone: "no device of this group can pass", "none can fail at
runtime". The allocator answers a selector that names a model the cluster does not have from there, without
visiting a device, and skips nodes that cannot hold a request only where no selector could fail on them.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from gpudra.allocator.cel.celview import Schema
from gpudra.allocator.pools import DeviceEntry


@dataclass(slots=True, eq=False)
class Group:
    """The devices of one schema."""

    schema: Schema
    driver: str
    multi: bool
    kinds: dict[str, type]
    """Attribute (qualified name) -> the Python type of its values (str, int, bool, Semver)."""
    capacities: frozenset[str]
    count: int = 0
    values: dict[str, dict[object, int]] = field(default_factory=dict)
    """Attribute -> value -> how many devices of the group carry it."""

    @classmethod
    def of(cls, schema: Schema) -> Group:
        driver, multi, kinds, capacities = schema
        assert isinstance(driver, str) and isinstance(kinds, tuple) and isinstance(capacities, tuple)
        return cls(schema, driver, bool(multi), dict(kinds), frozenset(capacities))


class DeviceIndex:
    """Groups of the devices of every built pool (``ClusterSnapshot`` adds and removes entries as it builds)."""

    def __init__(self) -> None:
        self.groups: dict[Schema, Group] = {}
        self.unviewed = 0
        """Devices without a CEL view (a malformed value): every selector fails on them."""
        self.memo: dict[Hashable, bool] = {}
        """Answers read from the groups by callers (``requests.passes_all``), emptied whenever a count changes."""

    def add(self, entries: Iterable[DeviceEntry]) -> None:
        for entry in entries:
            self._count(entry, +1)

    def remove(self, entries: Iterable[DeviceEntry]) -> None:
        for entry in entries:
            self._count(entry, -1)

    def _count(self, entry: DeviceEntry, delta: int) -> None:
        if self.memo:
            self.memo.clear()
        view = entry.view
        if view is None:
            self.unviewed += delta
            return
        group = self.groups.get(entry.schema)
        if group is None:
            group = self.groups[entry.schema] = Group.of(entry.schema)
        group.count += delta
        if not group.count:
            del self.groups[entry.schema]
            return
        for name, value in view.values.items():
            counts = group.values.get(name)
            if counts is None:
                counts = group.values[name] = {}
            left = counts.get(value, 0) + delta
            if left:
                counts[value] = left
            else:
                del counts[value]
