"""Counts of published devices for the CLI's table and the metrics: full GPUs by model, MIG by profile."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpudra.api.dra import Device


def _string_attribute(device: Device, name: str) -> str | None:
    attribute = (device.attributes or {}).get(name)
    if attribute is None or attribute.string is None:
        return None
    return attribute.string


@dataclass(frozen=True)
class DeviceSummary:
    """How many devices of each kind a list holds. ``by_type`` counts the ``type`` attribute ("gpu", "mig",
    "channel", ...; "unknown" when absent); ``gpus_by_product`` and ``mig_by_profile`` break the two GPU kinds
    down further."""

    total: int = 0
    by_type: dict[str, int] = field(default_factory=dict)
    gpus_by_product: dict[str, int] = field(default_factory=dict)
    mig_by_profile: dict[str, int] = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        return self.by_type.get("gpu", 0)

    @property
    def migs(self) -> int:
        return self.by_type.get("mig", 0)

    def rows(self) -> list[tuple[str, str, int]]:
        """(type, detail, count) rows: gpu rows by product, then mig rows by profile, then other types."""
        rows = [("gpu", product, n) for product, n in sorted(self.gpus_by_product.items())]
        rows += [("mig", profile, n) for profile, n in sorted(self.mig_by_profile.items())]
        rows += [(kind, "", n) for kind, n in sorted(self.by_type.items()) if kind not in ("gpu", "mig")]
        return rows


def summarize(devices: Iterable[Device]) -> DeviceSummary:
    """Count ``devices`` by type, full GPUs by productName, MIG devices by profile."""
    by_type: Counter[str] = Counter()
    products: Counter[str] = Counter()
    profiles: Counter[str] = Counter()
    total = 0
    for device in devices:
        total += 1
        kind = _string_attribute(device, "type") or "unknown"
        by_type[kind] += 1
        if kind == "gpu":
            products[_string_attribute(device, "productName") or "unknown"] += 1
        elif kind == "mig":
            profiles[_string_attribute(device, "profile") or "unknown"] += 1
    return DeviceSummary(
        total=total,
        by_type=dict(sorted(by_type.items())),
        gpus_by_product=dict(sorted(products.items())),
        mig_by_profile=dict(sorted(profiles.items())),
    )
