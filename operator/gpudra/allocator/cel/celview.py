"""The ``device`` variable of a DRA selector as plain Python values, built once per published device.

Kubernetes gives a selector ``device.driver``, ``device.attributes`` (domain -> name -> int | bool | string |
Semver, or a list of one of those), ``device.capacity`` (domain -> name -> Quantity) and
``device.allowMultipleAllocations``. A
:class:`CelDevice` holds exactly that: bare attribute names go under the driver's domain, versions become
:class:`Semver`, lists tuples, capacities :class:`Quantity`. The allocator builds one per device when the device's slice
arrives (``pools.make_entry``) and keeps it for the life of the slice; both evaluators read it (the closures of
``celclosures`` directly, the CEL library through an activation ``cel`` caches on it).

Qualified names and string values are interned (versions and quantities are parsed once per distinct text): the
devices of one model share their values, which selectors over thousands of devices then find in the CPU's
cache, and a lookup by an interned key (``qualified_key``) matches on identity.

This module does not import the CEL library, so the pure allocator layers can build views without it.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Hashable, Mapping
from typing import TypeVar

from gpudra.allocator.cel.celtypes import Quantity, Semver
from gpudra.api.dra import Device

__all__ = ["CelDevice", "Schema", "cel_device", "qualified_key", "schema_of"]

AttributeValue = int | bool | str | Semver | tuple[int | bool | str | Semver, ...]
"""A scalar, or a list attribute's values as a tuple (DRAListTypeAttributes)."""
Schema = tuple[object, ...]
"""What selectors can know about a device without its values: driver, allowMultipleAllocations, each attribute's
qualified name and kind, each capacity's qualified name (``schema_of``)."""


class CelDevice:
    """One device as selectors see it. Two views with the same ``shape_key`` answer every selector alike.

    ``values`` and ``quantities`` hold the attributes and capacities by qualified name (``domain/name``): one
    lookup for the common ``device.attributes["gpu.nvidia.com"].productName``, and one object less to bring
    into the CPU's cache per device when a selector runs over thousands. ``attributes`` and ``capacity`` give
    the same as maps of domain to name to value, as CEL sees them (built when first asked for)."""

    __slots__ = (
        "_attributes", "_capacity", "_keys", "_shape", "allow_multiple_allocations", "driver", "library",
        "quantities", "values",
    )  # fmt: skip

    def __init__(
        self,
        driver: str,
        values: dict[str, AttributeValue],
        quantities: dict[str, Quantity],
        allow_multiple_allocations: bool = False,
    ) -> None:
        self.driver = driver
        self.values = values
        self.quantities = quantities
        self.allow_multiple_allocations = allow_multiple_allocations
        self._attributes: dict[str, dict[str, AttributeValue]] | None = None
        self._capacity: dict[str, dict[str, Quantity]] | None = None
        self._shape: Hashable | None = None
        self._keys: dict[object, object] | None = None
        self.library: dict[object, object] = {}
        """The CEL library's activations of this device, by the empty domains filled in (``cel`` owns it)."""

    @property
    def attributes(self) -> Mapping[str, Mapping[str, AttributeValue]]:
        if self._attributes is None:
            self._attributes = _nested(self.values)
        return self._attributes

    @property
    def capacity(self) -> Mapping[str, Mapping[str, Quantity]]:
        if self._capacity is None:
            self._capacity = _nested(self.quantities)
        return self._capacity

    @property
    def shape_key(self) -> Hashable:
        """Everything a selector can observe, hashable (computed once)."""
        if self._shape is None:
            self._shape = (
                self.driver,
                frozenset((k, type(v), v) for k, v in self.values.items()),
                frozenset(self.quantities.items()),
                self.allow_multiple_allocations,
            )
        return self._shape

    def keys(self) -> dict[object, object]:
        """Lookup keys for result caches that key on a projection of the device (computed once):
        ``("driver",)``, ``("multi",)``, ``("a"|"c", domain, name)`` -> (type, value) and ``("A"|"C", domain)``
        -> the whole domain map, frozen."""
        if self._keys is None:
            keys: dict[object, object] = {
                ("driver",): self.driver,
                ("multi",): self.allow_multiple_allocations,
            }
            for tag, maps in (("a", self.attributes), ("c", self.capacity)):
                for domain, values in maps.items():
                    typed = {name: (type(value), value) for name, value in values.items()}
                    for name, pair in typed.items():
                        keys[(tag, domain, name)] = pair
                    keys[(tag.upper(), domain)] = frozenset(typed.items())
            self._keys = keys
        return self._keys

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CelDevice) and self.shape_key == other.shape_key

    def __hash__(self) -> int:
        return hash(self.shape_key)

    def __repr__(self) -> str:
        return f"CelDevice({self.driver!r}, {self.values!r}, {self.quantities!r})"


V = TypeVar("V")


def _nested(flat: dict[str, V]) -> dict[str, dict[str, V]]:
    nested: dict[str, dict[str, V]] = {}
    for qualified, value in flat.items():
        domain, _, name = qualified.rpartition("/")
        nested.setdefault(domain, {})[name] = value
    return nested


@functools.lru_cache(maxsize=8192)
def _parsed_version(text: str) -> Semver:
    return Semver.parse(text, normalize=True)


@functools.lru_cache(maxsize=8192)
def _parsed_quantity(text: str) -> Quantity:
    return Quantity.parse(text)


def cel_device(driver: str, device: Device) -> CelDevice:
    """The CEL view of one published device. Raise InvalidInputError for a malformed version or quantity."""
    values: dict[str, AttributeValue] = {}
    for name, attribute in (device.attributes or {}).items():
        if attribute.versions is not None:
            values[_qualified(name, driver)] = tuple(_parsed_version(v) for v in attribute.versions)
            continue
        if attribute.is_list:
            values[_qualified(name, driver)] = attribute.values
            continue
        value: AttributeValue | None = attribute.string
        if attribute.string is not None:
            value = sys.intern(attribute.string)  # shared by every device of a model: compared on identity
        else:
            value = attribute.int_
            if value is None:
                value = attribute.bool_
                if value is None:
                    value = _parsed_version(str(attribute.version))
        values[_qualified(name, driver)] = value
    quantities = {
        _qualified(name, driver): _parsed_quantity(entry.value)
        for name, entry in (device.capacity or {}).items()
    }
    return CelDevice(sys.intern(driver), values, quantities, bool(device.allow_multiple_allocations))


def _qualified(name: str, driver: str) -> str:
    """``domain/name``: a bare name (or an empty domain) is the driver's. Interned, as are the keys the selectors
    look up (``qualified_key``): a lookup then matches on identity."""
    if "/" not in name:
        return sys.intern(f"{driver}/{name}")
    return sys.intern(f"{driver}{name}" if name.startswith("/") else name)


def qualified_key(domain: str, name: str) -> str:
    """The key of ``device.attributes[domain].name`` (or capacity) in ``values`` (``quantities``), interned."""
    return sys.intern(f"{domain}/{name}")


_SCHEMAS: dict[Schema, Schema] = {}


def schema_of(view: CelDevice) -> Schema:
    """The device's schema, one shared tuple per distinct schema. Names keep the order the driver publishes
    them in: a driver that orders them differently on two devices only makes two groups where one would do."""
    schema: Schema = (
        view.driver,
        view.allow_multiple_allocations,
        tuple((name, type(value)) for name, value in view.values.items()),
        tuple(view.quantities),
    )
    if len(_SCHEMAS) > 4096:
        _SCHEMAS.clear()
    return _SCHEMAS.setdefault(schema, schema)
