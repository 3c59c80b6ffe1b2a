"""Pure: count the devices a ResourceSlice publishes, by node and device type (for the fleet gauges)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any


def slice_device_counts(body: Mapping[str, Any], driver: str) -> tuple[str, Counter[str]]:
    """(node name, counts by device type) of one slice body; empty for another driver's slice."""
    spec = body.get("spec") or {}
    if spec.get("driver") != driver:
        return "", Counter()
    counts: Counter[str] = Counter()
    for device in spec.get("devices") or []:
        attribute = (device.get("attributes") or {}).get("type") or {}
        counts[str(attribute.get("string", "unknown"))] += 1
    return str(spec.get("nodeName") or spec.get("pool", {}).get("name", "")), counts
