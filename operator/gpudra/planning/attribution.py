"""Pure: which device serves which claim and pod, with dcgm-exporter's DRA label names, and how much of each node's
GPU capacity is allocated. Dashboards keyed on ``nvidia_com_gpu`` go blank under DRA; these series replace them.

Label names follow dcgm-exporter: dra_claim_name, dra_claim_namespace, dra_driver_name, dra_pool_name,
dra_device_name, dra_mig_profile, dra_mig_device_uuid; plus pod and namespace of the first consumer.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from gpudra.api.quantity import parse_quantity
from gpudra.planning.summaries import attribute

USAGE_RESOURCES = ("devices", "memory", "multiprocessors", "memory_slices")

DeviceKey = tuple[str, str, str]  # driver, pool, device


def _capacity(device: Mapping[str, Any], name: str) -> float:
    entry = (device.get("capacity") or {}).get(name)
    return float(parse_quantity(entry["value"])) if entry else 0.0


def slice_devices(body: Mapping[str, Any]) -> dict[DeviceKey, dict[str, Any]]:
    spec = body.get("spec") or {}
    pool = (spec.get("pool") or {}).get("name", "")
    return {(spec.get("driver", ""), pool, d["name"]): d for d in spec.get("devices") or []}


def slice_counter_sets(body: Mapping[str, Any]) -> dict[DeviceKey, dict[str, Any]]:
    """(driver, pool, counter set) -> its counters, for the shared counters a slice publishes (dynamic MIG)."""
    spec = body.get("spec") or {}
    pool = (spec.get("pool") or {}).get("name", "")
    return {
        (spec.get("driver", ""), pool, c["name"]): c.get("counters") or {}
        for c in spec.get("sharedCounters") or []
    }


def allocation_series(
    claim: Mapping[str, Any], devices: Mapping[DeviceKey, Mapping[str, Any]]
) -> list[tuple[str, ...]]:
    """One label tuple (``gpudra.metrics.ALLOCATION_LABELS`` order) per allocated device of the claim."""
    meta = claim.get("metadata") or {}
    status = claim.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    consumers = status.get("reservedFor") or []
    pod = next((c.get("name", "") for c in consumers if c.get("resource") == "pods"), "")
    namespace = meta.get("namespace", "")
    out: list[tuple[str, ...]] = []
    for r in results:
        device = devices.get((r["driver"], r["pool"], r["device"]), {})
        mig = attribute(device, "type") == "mig"
        profile, mig_uuid = (attribute(device, "profile"), attribute(device, "uuid")) if mig else ("", "")
        gpu_uuid = attribute(device, "parentUUID") if mig else attribute(device, "uuid")
        labels = (
            meta.get("name", ""),
            namespace,
            r["driver"],
            r["pool"],
            r["device"],
            profile,
            mig_uuid,
            gpu_uuid,
        )
        out.append((*labels, pod, namespace if pod else ""))
    return out


def _counter(counters: Mapping[str, Any], name: str) -> float:
    entry = counters.get(name)
    return float(parse_quantity(entry["value"])) if entry else 0.0


def _memory_slices(counters: Mapping[str, Any]) -> float:
    return sum(_counter(counters, name) for name in counters if name.startswith("memory-slice-"))


def _set_usage(counters: Mapping[str, Any]) -> dict[str, float]:
    """What a dynamic MIG GPU offers: one GPU, whatever its placements; its memory, SMs and memory slices."""
    return {
        "devices": 1.0,
        "memory": _counter(counters, "memory"),
        "multiprocessors": _counter(counters, "multiprocessors"),
        "memory_slices": _memory_slices(counters),
    }


def _usage(device: Mapping[str, Any]) -> dict[str, float]:
    consumed = [c.get("counters") or {} for c in device.get("consumesCounters") or []]
    slices = float(sum(1 for name in (device.get("capacity") or {}) if name.startswith("memorySlice")))
    slices += sum(_memory_slices(counters) for counters in consumed)
    return {
        "devices": 1.0,
        "memory": _capacity(device, "memory"),
        "multiprocessors": _capacity(device, "multiprocessors"),
        "memory_slices": float(slices),
    }


def node_usage(
    claims: list[Mapping[str, Any]],
    devices: Mapping[DeviceKey, Mapping[str, Any]],
    counter_sets: Mapping[DeviceKey, Mapping[str, Any]] | None = None,
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """(allocated, capacity) per node and resource (devices, memory bytes, SMs, MIG memory slices). Devices that
    consume shared counters (dynamic MIG placements) are alternatives, not capacity: a node offers what its
    counter sets hold, one device per set."""
    capacity: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(USAGE_RESOURCES, 0.0))
    for (_, pool, _), device in devices.items():
        if device.get("consumesCounters"):
            continue
        for resource, amount in _usage(device).items():
            capacity[pool][resource] += amount
    for (_, pool, _), counters in (counter_sets or {}).items():
        for resource, amount in _set_usage(counters).items():
            capacity[pool][resource] += amount
    allocated: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(USAGE_RESOURCES, 0.0))
    for claim in claims:
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results"
        ) or []
        for r in results:
            found = devices.get((r["driver"], r["pool"], r["device"]))
            if found is not None:
                for resource, amount in _usage(found).items():
                    allocated[r["pool"]][resource] += amount
    return dict(allocated), dict(capacity)
