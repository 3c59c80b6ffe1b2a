"""Pure: one summary row per node of the fleet, from the objects any client of the cluster can list (Nodes,
ResourceSlices, ResourceClaims). ``gpudra status`` and ``gpudra up`` print these rows; ``-o json|yaml`` prints
them as data."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpudra.api.core import Node
from gpudra.api.dra import Device, ResourceClaim, ResourceSlice

PROFILE_LABEL = "gpudra.dev/node-profile"


def slice_device_counts(slice_: ResourceSlice, driver: str) -> tuple[str, Counter[str]]:
    """(node name, counts by device type) of one slice, for the fleet gauges; empty for another driver's slice."""
    spec = slice_.spec
    if spec.driver != driver:
        return "", Counter()
    counts = Counter(device.attribute_text("type") or "unknown" for device in spec.devices or [])
    return spec.node_name or spec.pool.name, counts


def allocated_devices(claims: Iterable[ResourceClaim], driver: str) -> dict[tuple[str, str], str]:
    """(pool, device) -> "namespace/name" of the claim holding it, for ``driver``'s devices."""
    held: dict[tuple[str, str], str] = {}
    for claim in claims:
        allocation = claim.allocation
        for result in allocation.results if allocation is not None else []:
            if result.driver == driver:
                held[(result.pool, result.device)] = claim.metadata.namespaced_name
    return held


def device_users(claims: Iterable[ResourceClaim], driver: str) -> dict[tuple[str, str], str]:
    """(pool, device) -> the short name people know the holder by: the pods the claim is reserved for (a claim
    made from a template is named after its pod plus a suffix), or the claim's own name while no pod reserves it."""
    users: dict[tuple[str, str], str] = {}
    for claim in claims:
        allocation = claim.allocation
        if allocation is None:
            continue
        reserved = (claim.status.reserved_for if claim.status is not None else None) or []
        pods = [r.name for r in reserved if r.resource == "pods"]
        label = ", ".join(pods) if pods else claim.metadata.name or ""
        for result in allocation.results:
            if result.driver == driver:
                users[(result.pool, result.device)] = label
    return users


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
    nodes: Iterable[Node],
    slices: Iterable[ResourceSlice],
    claims: Iterable[ResourceClaim],
    driver: str = "gpu.nvidia.com",
) -> list[FleetRow]:
    """One row per Node, by name: GPUs, MIG devices, published devices and slices of ``driver``, how many of
    them claims hold and how many are tainted."""
    per_node: dict[str, list[Device]] = defaultdict(list)
    slice_names: dict[str, list[str]] = defaultdict(list)
    for s in slices:
        if s.spec.driver != driver:
            continue
        node_name = s.spec.node_name or ""
        per_node[node_name].extend(s.spec.devices or [])
        slice_names[node_name].append(s.metadata.name or "")
    allocated = Counter(pool for pool, _ in allocated_devices(claims, driver))
    rows = []
    for node in sorted(nodes, key=lambda n: n.metadata.name or ""):
        name = node.metadata.name or ""
        devices = per_node.get(name, [])
        gpus = {
            d.attribute_text("uuid"): d.attribute_text("productName") for d in devices if _type(d) == "gpu"
        }
        migs = [d for d in devices if _type(d) == "mig"]
        gpus |= {d.attribute_text("parentUUID"): d.attribute_text("productName") for d in migs}
        rows.append(
            FleetRow(
                node=name,
                profile=(node.metadata.labels or {}).get(PROFILE_LABEL, "-"),
                gpus=dict(Counter(model or "unknown" for model in gpus.values())),
                mig_devices=dict(
                    Counter(d.attribute_text("profile") for d in migs if not d.consumes_counters)
                ),
                dynamic_mig_gpus=len({d.attribute_text("parentUUID") for d in migs if d.consumes_counters}),
                devices=len(devices),
                allocated=allocated.get(name, 0),
                unhealthy=sum(1 for d in devices if d.repels_claims),
                slices=tuple(sorted(slice_names.get(name, []))),
            )
        )
    return rows


def _type(device: Device) -> str:
    return device.attribute_text("type")
