"""Pure: which device serves which claim and pod, with dcgm-exporter's DRA label names, and how much of each node's
GPU capacity is allocated. Dashboards keyed on ``nvidia_com_gpu`` go blank under DRA; these series replace them.

Label names follow dcgm-exporter: dra_claim_name, dra_claim_namespace, dra_driver_name, dra_pool_name,
dra_device_name, dra_mig_profile, dra_mig_device_uuid; plus pod and namespace of the first consumer.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from gpudra.api.dra import Counter, Device, DeviceCapacity, ResourceClaim, ResourceSlice
from gpudra.api.quantity import parse_quantity

USAGE_RESOURCES = ("devices", "memory", "multiprocessors", "memory_slices")

DeviceKey = tuple[str, str, str]  # driver, pool, device


def _amount(quantities: Mapping[str, DeviceCapacity] | Mapping[str, Counter] | None, name: str) -> float:
    entry = (quantities or {}).get(name)
    return float(parse_quantity(entry.value)) if entry is not None else 0.0


def slice_devices(slice_: ResourceSlice) -> dict[DeviceKey, Device]:
    spec = slice_.spec
    return {(spec.driver, spec.pool.name, d.name): d for d in spec.devices or []}


def slice_counter_sets(slice_: ResourceSlice) -> dict[DeviceKey, dict[str, Counter]]:
    """(driver, pool, counter set) -> its counters, for the shared counters a slice publishes (dynamic MIG)."""
    spec = slice_.spec
    return {(spec.driver, spec.pool.name, c.name): c.counters for c in spec.shared_counters or []}


def allocation_series(claim: ResourceClaim, devices: Mapping[DeviceKey, Device]) -> list[tuple[str, ...]]:
    """One label tuple (``gpudra.metrics.ALLOCATION_LABELS`` order) per allocated device of the claim."""
    meta = claim.metadata
    allocation = claim.allocation
    consumers = (claim.status.reserved_for if claim.status is not None else None) or []
    pod = next((c.name for c in consumers if c.resource == "pods"), "")
    namespace = meta.namespace or ""
    out: list[tuple[str, ...]] = []
    for r in allocation.results if allocation is not None else []:
        device = devices.get((r.driver, r.pool, r.device))
        text = device.attribute_text if device is not None else _no_attribute
        mig = text("type") == "mig"
        profile, mig_uuid = (text("profile"), text("uuid")) if mig else ("", "")
        gpu_uuid = text("parentUUID") if mig else text("uuid")
        labels = (meta.name or "", namespace, r.driver, r.pool, r.device, profile, mig_uuid, gpu_uuid)
        out.append((*labels, pod, namespace if pod else ""))
    return out


def _no_attribute(name: str) -> str:
    return ""


def _memory_slices(counters: Mapping[str, Counter]) -> float:
    return sum(_amount(counters, name) for name in counters if name.startswith("memory-slice-"))


def _set_usage(counters: Mapping[str, Counter]) -> dict[str, float]:
    """What a dynamic MIG GPU offers: one GPU, whatever its placements; its memory, SMs and memory slices."""
    return {
        "devices": 1.0,
        "memory": _amount(counters, "memory"),
        "multiprocessors": _amount(counters, "multiprocessors"),
        "memory_slices": _memory_slices(counters),
    }


def _usage(device: Device) -> dict[str, float]:
    slices = float(sum(1 for name in device.capacity or {} if name.startswith("memorySlice")))
    slices += sum(_memory_slices(c.counters) for c in device.consumes_counters or [])
    return {
        "devices": 1.0,
        "memory": _amount(device.capacity, "memory"),
        "multiprocessors": _amount(device.capacity, "multiprocessors"),
        "memory_slices": float(slices),
    }


def node_usage(
    claims: Iterable[ResourceClaim],
    devices: Mapping[DeviceKey, Device],
    counter_sets: Mapping[DeviceKey, Mapping[str, Counter]] | None = None,
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """(allocated, capacity) per node and resource (devices, memory bytes, SMs, MIG memory slices). Devices that
    consume shared counters (dynamic MIG placements) are alternatives, not capacity: a node offers what its
    counter sets hold, one device per set."""
    capacity: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(USAGE_RESOURCES, 0.0))
    for (_, pool, _), device in devices.items():
        if device.consumes_counters:
            continue
        for resource, amount in _usage(device).items():
            capacity[pool][resource] += amount
    for (_, pool, _), counters in (counter_sets or {}).items():
        for resource, amount in _set_usage(counters).items():
            capacity[pool][resource] += amount
    allocated: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(USAGE_RESOURCES, 0.0))
    for claim in claims:
        for node, usage in claim_usage(claim, devices).items():
            for resource, amount in usage.items():
                allocated[node][resource] += amount
    return dict(allocated), dict(capacity)


def claim_usage(claim: ResourceClaim, devices: Mapping[DeviceKey, Device]) -> dict[str, dict[str, float]]:
    """What the claim's allocation takes of each node, by resource (devices of unknown slices count nothing)."""
    allocation = claim.allocation
    taken: dict[str, dict[str, float]] = {}
    for r in allocation.results if allocation is not None else []:
        found = devices.get((r.driver, r.pool, r.device))
        if found is not None:
            node = taken.setdefault(r.pool, dict.fromkeys(USAGE_RESOURCES, 0.0))
            for resource, amount in _usage(found).items():
                node[resource] += amount
    return taken
