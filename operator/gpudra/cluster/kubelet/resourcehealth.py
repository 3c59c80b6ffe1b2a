"""Device health in a pod's status as the 1.37 kubelet writes it (feature ResourceHealthStatus): pure, no I/O.

The kubelet keeps what each DRA plugin's health stream last said about each of its devices (:class:`HealthCache`),
and, for every regular container that names claims, writes ``status.containerStatuses[].allocatedResourcesStatus``:
one entry per claim reference of the container, named ``claim:<name>`` after the pod's name for the claim
(``claim:<name>/<request>`` when the container names a request), listing every device prepared for that claim
by its first CDI id (``<driver>/<pool>/<device>`` when it has none) with its health and, 1.36+, the plugin's
message. A device no report named for its ``health_check_timeout_seconds`` (30 s when unset), counted from when
the report arrived, reads ``Unknown``, as does every device of a plugin whose stream ended. Like the kubelet, the
claim behind a reference is looked up in ``status.resourceClaimStatuses`` only, so a claim the pod names directly
(``resourceClaimName``) gets no entry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpudra.agent.kubeletplugin import DeviceHealth, HealthStatus, PreparedDevice

DEFAULT_TIMEOUT_SECONDS = 30.0
"""What the kubelet assumes when a report does not say (health_check_timeout_seconds 0 or less)."""
_NAMES = {
    HealthStatus.HEALTHY: "Healthy",
    HealthStatus.UNHEALTHY: "Unhealthy",
    HealthStatus.UNKNOWN: "Unknown",
}

DeviceKey = tuple[str, str, str]
"""(driver, pool, device)"""


@dataclass(frozen=True, slots=True)
class _Report:
    health: HealthStatus
    message: str
    arrived: float
    timeout: float


@dataclass(frozen=True, slots=True)
class ClaimDevice:
    """A device prepared for a claim, and the driver that prepared it."""

    driver: str
    device: PreparedDevice


class HealthCache:
    """What the health streams last said, by driver; times are monotonic seconds of the caller's clock."""

    def __init__(self) -> None:
        self._reports: dict[str, dict[tuple[str, str], _Report]] = {}

    def update(self, driver: str, devices: Sequence[DeviceHealth], now: float) -> set[DeviceKey]:
        """A report from ``driver``'s stream (its full list); the devices whose health or message changed,
        those it no longer lists included."""
        old = self._reports.get(driver, {})
        new = {
            (d.pool_name, d.device_name): _Report(
                d.health,
                d.message,
                now,
                float(d.health_check_timeout_seconds)
                if d.health_check_timeout_seconds > 0
                else DEFAULT_TIMEOUT_SECONDS,
            )
            for d in devices
        }
        self._reports[driver] = new
        changed = {
            key
            for key in old.keys() | new.keys()
            if key not in old or key not in new or _shown(old[key]) != _shown(new[key])
        }
        return {(driver, pool, device) for pool, device in changed}

    def clear(self, driver: str) -> set[DeviceKey]:
        """``driver``'s stream ended: every device it reported is Unknown now; those devices."""
        gone = self._reports.pop(driver, {})
        return {(driver, pool, device) for pool, device in gone}

    def health(self, driver: str, pool: str, device: str, now: float) -> tuple[str, str]:
        """(health, message) as the kubelet shows it at ``now``."""
        report = self._reports.get(driver, {}).get((pool, device))
        if report is None or now - report.arrived > report.timeout:
            return "Unknown", ""
        return _shown(report)


def _shown(report: _Report) -> tuple[str, str]:
    return _NAMES.get(report.health, "Unknown"), report.message


def resource_id(driver: str, device: PreparedDevice) -> str:
    if device.cdi_device_ids:
        return device.cdi_device_ids[0]
    return f"{driver}/{device.pool_name}/{device.device_name}"


def allocated_resources_status(
    pod: dict[str, Any],
    prepared: Mapping[str, Sequence[ClaimDevice]],
    cache: HealthCache,
    now: float,
) -> dict[str, list[dict[str, Any]]]:
    """Container name -> its ``allocatedResourcesStatus`` (containers without one are left out);
    ``prepared`` maps a ResourceClaim's name to the devices prepared for it."""
    status = pod.get("status") or {}
    generated = {s.get("name"): s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []}
    result: dict[str, list[dict[str, Any]]] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        entries: dict[str, dict[str, Any]] = {}
        for ref in (container.get("resources") or {}).get("claims") or []:
            claim = generated.get(ref.get("name"))
            devices = prepared.get(claim or "")
            if not devices:
                continue
            name = f"claim:{ref.get('name')}"
            if ref.get("request"):
                name += f"/{ref['request']}"
            entries[name] = {"name": name, "resources": [_resource(d, cache, now) for d in devices]}
        if entries:
            result[str(container.get("name", ""))] = list(entries.values())
    return result


def _resource(entry: ClaimDevice, cache: HealthCache, now: float) -> dict[str, Any]:
    device = entry.device
    health, message = cache.health(entry.driver, device.pool_name, device.device_name, now)
    resource = {"resourceID": resource_id(entry.driver, device), "health": health}
    if message:
        resource["message"] = message
    return resource


def uses_any(prepared: Mapping[str, Sequence[ClaimDevice]], keys: set[DeviceKey]) -> bool:
    """Whether any of ``keys`` is among the prepared devices."""
    return any(
        (d.driver, d.device.pool_name, d.device.device_name) in keys for ds in prepared.values() for d in ds
    )


def with_resources_status(
    statuses: list[dict[str, Any]], by_container: Mapping[str, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Container statuses with their ``allocatedResourcesStatus`` set from ``by_container`` (removed where it
    has none)."""
    result = []
    for status in statuses:
        updated = {k: v for k, v in status.items() if k != "allocatedResourcesStatus"}
        entries = by_container.get(str(status.get("name", "")))
        if entries:
            updated["allocatedResourcesStatus"] = entries
        result.append(updated)
    return result
