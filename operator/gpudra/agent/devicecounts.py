"""The ``gpudra_devices_published`` gauge: how many devices this node's slices offer, by device type and MIG
profile. A (type, profile) no longer published is set to 0 rather than left at its last count."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from gpudra.api.dra import Device
from gpudra.metrics import Metrics


def _attribute(device: Device, name: str) -> str:
    attrs = device.attributes or {}
    return str(attrs[name].value) if name in attrs else ""


class PublishedDeviceCounts:
    def __init__(self, metrics: Metrics, *, node: str, driver: str) -> None:
        self._gauge = metrics.devices_published
        self._node = node
        self._driver = driver
        self._shown: set[tuple[str, str]] = set()

    def show(self, devices: Iterable[Device]) -> None:
        """Set the gauge to the devices published now."""
        counts = Counter((_attribute(d, "type"), _attribute(d, "profile")) for d in devices)
        for key in self._shown - set(counts):
            self._gauge.labels(self._node, self._driver, *key).set(0)
        for key, n in counts.items():
            self._gauge.labels(self._node, self._driver, *key).set(n)
        self._shown = set(counts)
