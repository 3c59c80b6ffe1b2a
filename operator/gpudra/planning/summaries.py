"""Pure: one summary row per node of the fleet, from the objects any client of the cluster can list (Nodes,
ResourceSlices, ResourceClaims). ``gpudra status`` and ``gpudra up`` print these rows; ``-o json|yaml`` prints
them as data."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

PROFILE_LABEL = "gpudra.dev/node-profile"


def attribute(device: Mapping[str, Any], name: str) -> str:
    """A device's attribute as text, whatever its type ("" when absent)."""
    value = (device.get("attributes") or {}).get(name) or {}
    return str(next(iter(value.values()), ""))


def slice_device_counts(body: Mapping[str, Any], driver: str) -> tuple[str, Counter[str]]:
    """(node name, counts by device type) of one slice body, for the fleet gauges; empty for another driver's slice."""
    spec = body.get("spec") or {}
    if spec.get("driver") != driver:
        return "", Counter()
    counts = Counter(attribute(device, "type") or "unknown" for device in spec.get("devices") or [])
    return str(spec.get("nodeName") or spec.get("pool", {}).get("name", "")), counts


def is_tainted(device: Mapping[str, Any]) -> bool:
    """Whether a taint with an effect other than None is on the device (it repels claims)."""
    return any(t.get("effect") != "None" for t in device.get("taints") or [])


def allocated_devices(claims: Iterable[Mapping[str, Any]], driver: str) -> dict[tuple[str, str], str]:
    """(pool, device) -> "namespace/name" of the claim holding it, for ``driver``'s devices."""
    held: dict[tuple[str, str], str] = {}
    for claim in claims:
        meta = claim.get("metadata") or {}
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
        for result in results or []:
            if result.get("driver") == driver:
                held[(result.get("pool", ""), result.get("device", ""))] = (
                    f"{meta.get('namespace', '')}/{meta.get('name', '')}"
                )
    return held


@dataclass(frozen=True)
class FleetRow:
    """What ``gpudra status`` says about one node."""

    node: str
    profile: str
    gpus: dict[str, int]  # full GPUs (MIG-enabled ones included) by productName
    mig_devices: dict[str, int] = field(default_factory=dict)  # static MIG instances by profile
    dynamic_mig_gpus: int = 0
    devices: int = 0
    allocated: int = 0
    unhealthy: int = 0
    slices: tuple[str, ...] = ()

    @property
    def gpu_count(self) -> int:
        return sum(self.gpus.values())

    def gpu_text(self) -> list[str]:
        """One entry per model, e.g. ["8x NVIDIA H100 80GB HBM3"]."""
        return [f"{n}x {model}" for model, n in sorted(self.gpus.items())]

    def mig_text(self) -> list[str]:
        """One entry per MIG profile (and one for dynamic MIG GPUs), e.g. ["16x 1g.5gb", "8x 2g.10gb"]."""
        out = [f"{n}x {p}" for p, n in sorted(self.mig_devices.items())]
        if self.dynamic_mig_gpus:
            plural = "s" if self.dynamic_mig_gpus > 1 else ""
            out.append(f"dynamic on {self.dynamic_mig_gpus} GPU{plural}")
        return out

    def to_data(self) -> dict[str, Any]:
        """The row as ``-o json|yaml`` prints it (camelCase keys, like Kubernetes objects)."""
        return {
            "node": self.node,
            "profile": self.profile,
            "gpus": dict(sorted(self.gpus.items())),
            "migDevices": dict(sorted(self.mig_devices.items())),
            "dynamicMigGpus": self.dynamic_mig_gpus,
            "devices": self.devices,
            "allocated": self.allocated,
            "unhealthy": self.unhealthy,
            "slices": list(self.slices),
        }


def fleet_rows(
    nodes: Iterable[Mapping[str, Any]],
    slices: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    driver: str = "gpu.nvidia.com",
) -> list[FleetRow]:
    """One row per Node, by name: GPUs, MIG devices, published devices and slices of ``driver``, how many of
    them claims hold and how many are tainted."""
    per_node: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    slice_names: dict[str, list[str]] = defaultdict(list)
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("driver") != driver:
            continue
        node = spec.get("nodeName", "")
        per_node[node].extend(spec.get("devices") or [])
        slice_names[node].append(s["metadata"]["name"])
    allocated = Counter(pool for pool, _ in allocated_devices(claims, driver))
    rows = []
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        name = node["metadata"]["name"]
        devices = per_node.get(name, [])
        gpus = {
            attribute(d, "uuid"): attribute(d, "productName")
            for d in devices
            if attribute(d, "type") == "gpu"
        }
        gpus |= {
            attribute(d, "parentUUID"): attribute(d, "productName")
            for d in devices
            if attribute(d, "type") == "mig"
        }
        migs = [d for d in devices if attribute(d, "type") == "mig"]
        rows.append(
            FleetRow(
                node=name,
                profile=(node["metadata"].get("labels") or {}).get(PROFILE_LABEL, "-"),
                gpus=dict(Counter(model or "unknown" for model in gpus.values())),
                mig_devices=dict(
                    Counter(attribute(d, "profile") for d in migs if not d.get("consumesCounters"))
                ),
                dynamic_mig_gpus=len({attribute(d, "parentUUID") for d in migs if d.get("consumesCounters")}),
                devices=len(devices),
                allocated=allocated.get(name, 0),
                unhealthy=sum(1 for d in devices if is_tainted(d)),
                slices=tuple(sorted(slice_names.get(name, []))),
            )
        )
    return rows
