"""Plain words for explanations: what a device is (a GPU model, a MIG profile), in the singular and the plural,
and lists of names as a sentence writes them.

A device's kind comes from NVIDIA's attributes in its driver's own domain: ``type`` ("gpu", "mig", ...) and
``productName`` for a whole GPU, ``profile`` for a MIG device. Devices of other drivers are "devices".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpudra.allocator.pools import DeviceEntry

_GENERIC = {"gpu": ("GPU", "GPUs"), "mig": ("MIG device", "MIG devices")}


@dataclass(frozen=True, slots=True, order=True)
class Kind:
    """What a device is: its ``type`` and, when known, the label that tells devices of one type apart
    (the product name of a GPU, the profile of a MIG device)."""

    type: str = ""
    label: str = ""

    @property
    def specific(self) -> bool:
        return bool(self.label) and self.type in _GENERIC

    def generic(self) -> Kind:
        return Kind(self.type)

    def noun(self, count: int = 1) -> str:
        """``NVIDIA H100 80GB HBM3`` (a model name is its own plural), ``3g.20gb MIG devices``, ``GPU``."""
        if self.specific and self.type == "gpu":
            return self.label
        singular, plural = _GENERIC.get(self.type, ("device", "devices"))
        word = singular if count == 1 else plural
        return f"{self.label} {word}" if self.specific else word

    def summary(self) -> str:
        """What a node has, for a list such as "MIG devices on dgx-a100-0; NVIDIA L4 on l4x4-0"."""
        if self.type == "gpu" and self.label:
            return self.label
        return _GENERIC.get(self.type, ("device", "devices"))[1]


def kind_of(entry: DeviceEntry) -> Kind:
    domain = entry.id.driver
    kind = entry.attributes.get(f"{domain}/type")
    type_ = str(kind[1]) if kind is not None else ""
    label_attribute = {"gpu": "productName", "mig": "profile"}.get(type_)
    label = entry.attributes.get(f"{domain}/{label_attribute}") if label_attribute else None
    return Kind(type_, str(label[1]) if label is not None else "")


def common_kind(kinds: Iterable[Kind]) -> Kind:
    """The one kind all these devices share: the same kind, else the same type, else plain devices."""
    seen = set(kinds)
    if len(seen) == 1:
        return next(iter(seen))
    types = {k.type for k in seen}
    return Kind(types.pop()) if len(types) == 1 else Kind()


def conjoin(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def listed(names: Sequence[str], limit: int = 3) -> str:
    """``a, b, c`` and, past ``limit`` names, ``a, b, c and 5 more``."""
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f" and {len(names) - limit} more"


def claims_phrase(claims: Sequence[str], limit: int = 3) -> str:
    """``default/a``, ``default/a and default/b``, ``default/a, default/b, default/c and 2 more claims``."""
    if len(claims) <= limit:
        return conjoin(claims)
    return ", ".join(claims[:limit]) + f" and {len(claims) - limit} more claims"


def counted(count: int, singular: str, plural: str) -> str:
    return f"{count} {singular if count == 1 else plural}"
