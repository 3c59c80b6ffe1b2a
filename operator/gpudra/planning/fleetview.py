"""Pure: the fleet as the web view draws it, one card per node, from the objects any client can watch.

A node's card holds its GPUs: model, memory, health (device taints), who holds it, and for a GPU with MIG on its
geometry to scale: the memory slices and compute slices of the model (by productName, from the MIG facts the
node's agent reported, read from NVML; from the GPU catalog for a node that reported none) and
every instance with its profile, placement and holder. Static MIG shows the instances that exist (the published
MIG devices, placed by their ``memorySlice<i>`` capacities); dynamic MIG shows what is carved now, the allocated
placements (each consumes its ``memory-slice-<i>`` counters), and the full GPU when a claim holds it whole.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from gpudra.api.core import Node, Taint
from gpudra.api.dra import Device, DeviceTaint, ResourceSlice
from gpudra.api.quantity import parse_quantity
from gpudra.devices import parse_mig_device_name
from gpudra.errors import InvalidInputError
from gpudra.hardware.gpus.catalog import Catalog, MigModel, MigSpec
from gpudra.planning.migmodels import FleetMigModels
from gpudra.planning.summaries import PROFILE_LABEL

Holders = Mapping[tuple[str, str], str]
ModelOf = Callable[[str], MigModel | None]  # productName -> the model's MIG facts

_GPU_NAME = re.compile(r"^gpu-(\d+)$")
_MIG_PARENT = re.compile(r"^gpu-(\d+)-mig-")
_MEMORY_SLICE_CAPACITY = re.compile(r"^memorySlice(\d+)$")
_MEMORY_SLICE_COUNTER = re.compile(r"^memory-slice-(\d+)$")
_COMPUTE = re.compile(r"^(\d+)g\.")
# Without MIG facts for the model: the geometry of every 8-slot MIG GPU (A100, H100, H200, B200).
DEFAULT_MEMORY_SLICES, DEFAULT_COMPUTE_SLICES = 8, 7


@dataclass(frozen=True)
class MigSlot:
    """One MIG instance: memory slices ``start .. start+size-1`` and compute slices ``start .. start+compute-1``
    (compute slice i sits under memory slice i, as NVIDIA draws them)."""

    device: str
    profile: str
    start: int
    size: int
    compute: int
    holder: str | None = None
    user: str | None = None  # the holder's short name: its pods, or the claim's name
    unhealthy: bool = False


@dataclass(frozen=True)
class MigGeometry:
    memory_slices: int
    compute_slices: int
    instances: tuple[MigSlot, ...]
    dynamic: bool = False

    @property
    def free_memory_slices(self) -> int:
        return self.memory_slices - sum(i.size for i in self.instances)


@dataclass(frozen=True)
class GpuCard:
    name: str  # gpu-<minor>
    minor: int
    model: str
    memory_bytes: int
    uuid: str
    holder: str | None = None  # the claim holding the whole GPU
    user: str | None = None  # its short name: the pods it is reserved for, or the claim's name
    taints: tuple[str, ...] = ()  # "key=value:Effect" of the GPU's devices
    unhealthy: bool = False  # a taint that repels claims
    mig: MigGeometry | None = None

    @property
    def held(self) -> str:
        """allocated (whole or every slice held), partial (some MIG instance held) or free, whatever its health."""
        if self.holder is not None:
            return "allocated"
        if self.mig is not None and any(i.holder for i in self.mig.instances):
            full = self.mig.free_memory_slices == 0 and all(i.holder for i in self.mig.instances)
            return "allocated" if full else "partial"
        return "free"

    @property
    def state(self) -> str:
        """unhealthy, or else :attr:`held`."""
        return "unhealthy" if self.unhealthy else self.held


@dataclass(frozen=True)
class NodeCard:
    name: str
    profile: str
    ready: bool
    unschedulable: bool
    taints: tuple[str, ...]
    gpus: tuple[GpuCard, ...]
    other_devices: int  # devices of other drivers (ComputeDomain channels, ...)

    def count(self, state: str) -> int:
        return sum(1 for g in self.gpus if g.state == state)


def taint_text(taint: Taint | DeviceTaint) -> str:
    return f"{taint.key}{'=' + taint.value if taint.value else ''}:{taint.effect}"


def _memory_slices(device: Device) -> list[int]:
    """The memory slices a MIG device occupies: its ``memorySlice<i>`` capacities (static) or the
    ``memory-slice-<i>`` counters it consumes (dynamic)."""
    found = [int(m.group(1)) for key in device.capacity or {} if (m := _MEMORY_SLICE_CAPACITY.match(key))]
    for consumption in device.consumes_counters or []:
        found += [int(m.group(1)) for key in consumption.counters if (m := _MEMORY_SLICE_COUNTER.match(key))]
    return sorted(found)


def _capacity_bytes(device: Device, name: str = "memory") -> int:
    entry = (device.capacity or {}).get(name)
    try:
        return int(parse_quantity(entry.value)) if entry is not None else 0
    except InvalidInputError:
        return 0


def _compute_slices(profile: str, spec: MigSpec | None) -> int:
    for known in spec.profiles if spec is not None else ():
        if known.name == profile:
            return known.slice_count
    match = _COMPUTE.match(profile)
    return int(match.group(1)) if match else 1


def _minor(name: str) -> int | None:
    match = _GPU_NAME.match(name) or _MIG_PARENT.match(name)
    return int(match.group(1)) if match else None


@dataclass
class _GpuParts:
    full: Device | None = None
    migs: list[Device] | None = None


def gpu_cards(
    devices: Sequence[Device], pool: str, holders: Holders, models: ModelOf, users: Holders | None = None
) -> list[GpuCard]:
    """The GPUs of one node's devices (one driver's pool), by minor."""
    parts: dict[int, _GpuParts] = defaultdict(_GpuParts)
    for device in devices:
        kind, minor = device.attribute_text("type"), _minor(device.name)
        if minor is None:
            continue
        if kind == "gpu":
            parts[minor].full = device
        elif kind == "mig":
            parts[minor].migs = [*(parts[minor].migs or []), device]
    return [
        _gpu_card(minor, p, pool, holders, models, users or {})
        for minor, p in sorted(parts.items())
        if p.full or p.migs
    ]


def _gpu_card(
    minor: int, parts: _GpuParts, pool: str, holders: Holders, models: ModelOf, users: Holders
) -> GpuCard:
    migs = parts.migs or []
    sample = parts.full or migs[0]
    model = sample.attribute_text("productName")
    known = models(model)
    spec = known.mig if known is not None else None
    name = f"gpu-{minor}"
    taints = [t for d in ([parts.full] if parts.full else []) + migs for t in d.taints or []]
    dynamic = any(d.consumes_counters for d in migs)
    memory = _capacity_bytes(parts.full) if parts.full else (known.memory_bytes if known is not None else 0)
    geometry = None
    if migs:
        slots = []
        for device in migs:
            device_name = device.name
            holder = holders.get((pool, device_name))
            if dynamic and holder is None:
                continue  # a placement offered, not carved
            occupied = _memory_slices(device)
            parsed = parse_mig_device_name(device_name)
            start = occupied[0] if occupied else (parsed[2] if parsed else 0)
            profile = device.attribute_text("profile")
            slots.append(
                MigSlot(
                    device=device_name,
                    profile=profile,
                    start=start,
                    size=len(occupied) or 1,
                    compute=_compute_slices(profile, spec),
                    holder=holder,
                    user=users.get((pool, device_name)),
                    unhealthy=device.repels_claims,
                )
            )
        geometry = MigGeometry(
            memory_slices=spec.memory_slices if spec else DEFAULT_MEMORY_SLICES,
            compute_slices=spec.compute_slices if spec else DEFAULT_COMPUTE_SLICES,
            instances=tuple(sorted(slots, key=lambda s: s.start)),
            dynamic=dynamic,
        )
    return GpuCard(
        name=name,
        minor=minor,
        model=model,
        memory_bytes=memory,
        uuid=sample.attribute_text("parentUUID") or sample.attribute_text("uuid"),
        holder=holders.get((pool, name)) if parts.full else None,
        user=users.get((pool, name)) if parts.full else None,
        taints=tuple(sorted({taint_text(t) for t in taints})),
        unhealthy=any(t.effect != "None" for t in taints),
        mig=geometry,
    )


def node_card(
    name: str,
    node: Node | None,
    slices: Iterable[ResourceSlice],
    holders: Holders,
    catalog: Catalog,
    driver: str = "gpu.nvidia.com",
    users: Holders | None = None,
) -> NodeCard:
    """One node's card: its Node (None when only slices name it) and every slice published for it; ``users``:
    the holders' short names (:func:`~gpudra.planning.summaries.device_users`)."""
    mig_models = FleetMigModels.of_nodes([node] if node is not None else [], catalog)
    ours: list[Device] = []
    others = 0
    pool = name
    for s in slices:
        if s.spec.driver == driver:
            ours.extend(s.spec.devices or [])
            pool = s.spec.pool.name
        else:
            others += len(s.spec.devices or [])
    node = node if node is not None else Node()
    conditions = (node.status.conditions if node.status is not None else None) or []
    return NodeCard(
        name=name,
        profile=(node.metadata.labels or {}).get(PROFILE_LABEL, ""),
        ready=any(c.type == "Ready" and c.status == "True" for c in conditions),
        unschedulable=bool(node.spec.unschedulable),
        taints=tuple(taint_text(t) for t in node.spec.taints or []),
        gpus=tuple(gpu_cards(ours, pool, holders, partial(mig_models.by_product_name, name), users)),
        other_devices=others,
    )
