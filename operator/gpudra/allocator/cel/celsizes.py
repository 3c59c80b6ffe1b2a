"""Sizes and costs as cel-go's cost estimator counts them, and the largest values a DRA device can hold.

A size or a cost is a (min, max) pair of unsigned 64-bit counts that saturate at 2**64 - 1 (cel-go's
SizeEstimate and CostEstimate); a factor rounds up, as cel-go's does. ``DEVICE`` answers the size estimator of
k8s.io/dynamic-resource-allocation/cel: how long a string, how many entries a map under ``device`` can have.
``celcost`` estimates with them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpudra.allocator.cel.celast import Node

__all__ = ["DEVICE", "MAX", "UNKNOWN", "Range", "add", "factor", "fixed", "literal_size", "mul", "union"]

MAX = 2**64 - 1
Range = tuple[int, int]
"""A (min, max) pair: a size or a cost."""
UNKNOWN: Range = (0, MAX)


def add(a: Range, b: Range) -> Range:
    return min(a[0] + b[0], MAX), min(a[1] + b[1], MAX)


def mul(a: Range, b: Range) -> Range:
    return min(a[0] * b[0], MAX), min(a[1] * b[1], MAX)


def _scale(x: int, per_unit: float) -> int:
    product = float(x) * per_unit
    if product >= 2.0**64:
        return MAX
    return min(math.ceil(product), MAX)


def factor(a: Range, per_unit: float) -> Range:
    """Each bound times ``per_unit``, rounded up (cel-go's MultiplyByCostFactor)."""
    return _scale(a[0], per_unit), _scale(a[1], per_unit)


def union(a: Range, b: Range) -> Range:
    return min(a[0], b[0]), max(a[1], b[1])


def fixed(n: int) -> Range:
    return n, n


# ---- the largest values of a device (k8s.io/dynamic-resource-allocation/cel's size estimator) -------------------
@dataclass(frozen=True, slots=True, eq=False)
class _Decl:
    max_elements: int = 0
    fields: dict[str, _Decl] = field(default_factory=dict)
    key: _Decl | None = None
    elem: _Decl | None = None


def _device() -> tuple[_Decl, _Decl]:
    """(device, attribute value) declarations: 32 attributes and capacities per device, domains of 63 characters,
    names of 32, values of 64 (a string's characters; a list attribute's 48 values are fewer)."""
    domain, name = _Decl(63), _Decl(32)
    attribute = _Decl(64)
    attributes = _Decl(32, key=domain, elem=_Decl(32, key=name, elem=attribute))
    capacity = _Decl(32, key=domain, elem=_Decl(32, key=name, elem=_Decl(0)))
    fields = {"driver": _Decl(63), "attributes": attributes, "capacity": capacity}
    fields["allowMultipleAllocations"] = _Decl(1)
    return _Decl(0, fields=fields), attribute


def _device_size(path: tuple[str, ...] | None, device: _Decl, attribute: _Decl) -> Range | None:
    if not path or path[0] != "device":
        return None
    node = device
    for name in path[1:]:
        if name in ("@items", "@values"):
            if node.elem is None:
                return None
            node = node.elem
        elif name == "@keys":
            if node.key is None:
                return None
            node = node.key
        elif name in node.fields:
            node = node.fields[name]
        elif node.elem is attribute:
            node = attribute
        else:
            return None
    return 0, node.max_elements


def literal_size(node: Node) -> Range | None:
    if node.kind == "const":
        if node.name == "string":
            return fixed(len(str(node.value)))
        if node.name == "bytes":
            assert isinstance(node.value, bytes)
            return fixed(len(node.value))
        return fixed(1)
    if node.kind == "list":
        return fixed(len(node.args))
    if node.kind == "struct" and not node.name:
        return fixed(len(node.args))
    return None


@dataclass(frozen=True, slots=True, eq=False)
class _DeviceSizes:
    device: _Decl
    attribute: _Decl

    def size(self, path: tuple[str, ...] | None) -> Range | None:
        """The size of what ``path`` (``device``, a field, ``@keys``, ``@values``, ...) reaches; None if unknown."""
        return _device_size(path, self.device, self.attribute)


DEVICE = _DeviceSizes(*_device())
