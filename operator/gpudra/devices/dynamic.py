"""Dynamic MIG: a MIG-capable GPU published as partitionable devices (KEP-4815), NVIDIA's DynamicMIG layout.

One counter set per GPU, ``gpu-<minor>-counter-set``, holding what the GPU has: ``multiprocessors``,
``copy-engines``, ``decoders``, ``encoders``, ``jpeg-engines``, ``ofa-engines``, ``memory`` (bytes) and one
``memory-slice-<i>`` counter (value 1) per memory slice. Devices:

- every (profile, placement) pair the GPU supports, named as the static MIG device at that placement would be
  (``gpu-<minor>-mig-<profile>-<giProfileId>-<start>``), with the static MIG attributes except ``uuid`` (the
  instance does not exist yet) and the static capacities except ``memorySlice<i>``; it consumes its engines, its
  memory and the memory slices ``start .. start+size-1``;
- the full GPU ``gpu-<minor>`` (the usual GPU attributes), consuming every counter in full.

What the arithmetic guarantees (tests/unit/test_devices_dynamic.py checks it against mig/validate): two
placements that share a memory slice never fit together; the full GPU never fits beside any MIG device; at most
one ``+me`` instance fits (it takes the GPU's only OFA engine); every layout the hardware can create fits.

Instances that exist on a dynamic GPU without being created for a claim (``foreign``: left over from a static
layout, or made by hand) are not known to the counters. They are published as the static MIG devices they are
(usable, no counters), and the placements overlapping them, and the full GPU, are left out rather than offered
and then failed at prepare. Nothing is destroyed to make room (NVIDIA's driver destroys unknown instances at
start-up, which left A100s needing a reset: its issue #883).

A MIG instance created or destroyed for a claim changes the GPU's reading but not what it publishes (a claimed
instance is no foreign one). :class:`DynamicMemo` keeps each GPU's last build and hands it back while what it is
built from is the same, so a burst of claims on a dgx-h100 does not rebuild its 208 devices (about 25 ms) at
every instance it creates.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpudra.api.dra import Counter, CounterSet, Device, DeviceCounterConsumption
from gpudra.api.quantity import format_quantity
from gpudra.devices.build import (
    devices_of_gpu,
    gpu_device,
    in_name_order,
    mig_attributes,
    mig_capacity,
    mig_device,
)
from gpudra.devices.names import device_sort_key, mig_device_name
from gpudra.hardware.gpus.backend import MigProfileInfo
from gpudra.hardware.gpus.inventory import GpuInfo, MigDeviceInfo, NodeInventory

MEMORY = "memory"
# counter name -> MigProfileInfo field, in NVIDIA's order
ENGINE_COUNTERS = (
    ("multiprocessors", "multiprocessors"),
    ("copy-engines", "copy_engines"),
    ("decoders", "decoders"),
    ("encoders", "encoders"),
    ("jpeg-engines", "jpeg_engines"),
    ("ofa-engines", "ofa_engines"),
)


def counter_set_name(minor: int) -> str:
    return f"gpu-{minor}-counter-set"


def memory_slice_counter(index: int) -> str:
    return f"memory-slice-{index}"


def memory_slice_count(profiles: Sequence[MigProfileInfo]) -> int:
    """The GPU's memory slices: the end of the furthest placement (8 on A100/H100, 4 on A30)."""
    return max((start + p.placement_size for p in profiles for start in p.placements), default=0)


def _largest(profiles: Sequence[MigProfileInfo]) -> MigProfileInfo:
    return max(profiles, key=lambda p: (p.slice_count, p.placement_size, p.memory_bytes))


def gpu_counters(gpu: GpuInfo, profiles: Sequence[MigProfileInfo]) -> dict[str, int]:
    """What the GPU has: engines of its largest profile (the 7g owns them all), SMs and memory of the whole GPU
    (at least the largest profile's), and each memory slice once."""
    largest = _largest(profiles)
    values = {name: int(getattr(largest, field)) for name, field in ENGINE_COUNTERS}
    values["multiprocessors"] = max(values["multiprocessors"], gpu.multiprocessors)
    values[MEMORY] = max(largest.memory_bytes, gpu.memory_bytes or 0)
    for index in range(memory_slice_count(profiles)):
        values[memory_slice_counter(index)] = 1
    return values


def placement_counters(profile: MigProfileInfo, start: int) -> dict[str, int]:
    """What one instance of ``profile`` at ``start`` consumes."""
    values = {name: int(getattr(profile, field)) for name, field in ENGINE_COUNTERS}
    values[MEMORY] = profile.memory_bytes
    for index in range(start, start + profile.placement_size):
        values[memory_slice_counter(index)] = 1
    return values


def _counters(values: dict[str, int], *, keep_zero: bool) -> dict[str, Counter]:
    return {name: Counter(value=format_quantity(v)) for name, v in values.items() if v or keep_zero}


def _consumes(minor: int, values: dict[str, int]) -> list[DeviceCounterConsumption]:
    counters = _counters(values, keep_zero=False)
    return [DeviceCounterConsumption(counter_set=counter_set_name(minor), counters=counters)]


_FROM_PROFILE = {
    "gi_profile_id", "placement_size", "memory_bytes", "multiprocessors", "copy_engines", "decoders", "encoders",
    "jpeg_engines", "ofa_engines",
}  # fmt: skip


def _as_instance(gpu: GpuInfo, profile: MigProfileInfo, start: int) -> MigDeviceInfo:
    """The MIG device an instance of ``profile`` at ``start`` would be (no UUID or ids yet)."""
    return MigDeviceInfo(
        uuid="", parent_uuid=gpu.uuid, parent_index=gpu.index, parent_minor=gpu.minor, profile=profile.profile,
        ci_profile_id=0, gi_id=0, ci_id=0, placement_start=start, **profile.model_dump(include=_FROM_PROFILE),
    )  # fmt: skip


def _span(start: int, size: int) -> set[int]:
    return set(range(start, start + size))


@dataclass(frozen=True)
class DynamicGpu:
    """What one dynamic GPU publishes: its counter set and the devices consuming it."""

    counter_set: CounterSet
    devices: tuple[Device, ...]


def dynamic_gpu(
    gpu: GpuInfo,
    profiles: Sequence[MigProfileInfo],
    inventory: NodeInventory,
    *,
    foreign: Iterable[MigDeviceInfo] = (),
    extensions: bool = True,
) -> DynamicGpu:
    """The counter set and partitionable devices of one MIG-capable GPU (``profiles`` as the hardware reports
    them). A ``foreign`` instance is published as a static MIG device; the placements overlapping it, and then
    the full GPU, are left out."""
    taken: set[int] = set()
    devices: list[Device] = []
    for instance in foreign:
        taken |= _span(instance.placement_start, instance.placement_size)
        devices.append(mig_device(gpu, instance, inventory))
    if not taken:
        full = gpu_device(gpu, inventory, extensions=extensions)
        consumes = _consumes(gpu.minor, gpu_counters(gpu, profiles))
        devices.append(full.model_copy(update={"consumes_counters": consumes}))
    for profile in profiles:
        for start in profile.placements:
            if _span(start, profile.placement_size) & taken:
                continue
            instance = _as_instance(gpu, profile, start)
            capacity = mig_capacity(instance, memory_slices=False)
            devices.append(
                Device(
                    name=mig_device_name(gpu.minor, profile.profile, profile.gi_profile_id, start),
                    attributes=mig_attributes(gpu, instance, inventory, with_uuid=False),
                    capacity=capacity,
                    consumes_counters=_consumes(gpu.minor, placement_counters(profile, start)),
                )
            )
    counters = _counters(gpu_counters(gpu, profiles), keep_zero=True)
    counter_set = CounterSet(name=counter_set_name(gpu.minor), counters=counters)
    return DynamicGpu(counter_set=counter_set, devices=tuple(devices))


class DynamicMemo:
    """Each dynamic GPU's last :class:`DynamicGpu`, by UUID, with what it was built from. A build is reused only
    when everything it reads is equal: the GPU's reading except its MIG instances (only the foreign ones, given
    apart, are published), its profiles, its foreign instances, the node's driver versions and ``extensions``.
    Builds of GPUs not seen in the last call are dropped."""

    def __init__(self) -> None:
        self._built: dict[str, tuple[Hashable, DynamicGpu]] = {}
        self._seen: dict[str, tuple[Hashable, DynamicGpu]] = {}

    def build(
        self,
        gpu: GpuInfo,
        profiles: Sequence[MigProfileInfo],
        inventory: NodeInventory,
        *,
        foreign: Sequence[MigDeviceInfo],
        extensions: bool,
    ) -> DynamicGpu:
        key = (
            tuple(value for name, value in gpu if name != "mig_devices"),
            tuple(profiles),
            tuple(foreign),
            extensions,
            inventory.node_name,
            inventory.driver_version,
            inventory.cuda_driver_version,
        )
        kept = self._built.get(gpu.uuid)
        if kept is not None and kept[0] == key:
            published = kept[1]
        else:
            published = dynamic_gpu(gpu, profiles, inventory, foreign=foreign, extensions=extensions)
        self._seen[gpu.uuid] = (key, published)
        return published

    def end_call(self) -> None:
        """Keep only the builds of this call's GPUs."""
        self._built, self._seen = self._seen, {}


@dataclass(frozen=True)
class NodeDevices:
    """What a node publishes: its devices (name order) and the counter sets of its dynamic GPUs."""

    devices: list[Device]
    counter_sets: list[CounterSet]


def build_node_devices(
    inventory: NodeInventory,
    dynamic: Mapping[str, Sequence[MigProfileInfo]],
    *,
    claimed: Mapping[str, Iterable[tuple[str, int]]] | None = None,
    extensions: bool = True,
    memo: DynamicMemo | None = None,
) -> NodeDevices:
    """Every device of the node: GPUs whose UUID is a key of ``dynamic`` (with their MIG profiles) and that
    have MIG mode on are published as partitionable devices, the others as :func:`build_devices` does.
    ``claimed`` names, per GPU UUID, the (profile, placement start) of instances created for claims; any other
    instance on a dynamic GPU is foreign (see the module docstring). ``memo``: the dynamic GPUs' builds of the
    previous call, reused where nothing they are built from changed. InvalidInputError as build_devices."""
    memo = memo if memo is not None else DynamicMemo()
    owned = {uuid: set(placements) for uuid, placements in (claimed or {}).items()}
    devices: list[Device] = []
    counter_sets: list[CounterSet] = []
    for gpu in inventory.gpus:
        profiles = dynamic.get(gpu.uuid)
        if not (profiles and gpu.mig_enabled):
            devices.extend(devices_of_gpu(gpu, inventory, extensions=extensions))
            continue
        mine = owned.get(gpu.uuid, set())
        foreign = [m for m in gpu.mig_devices if (m.profile, m.placement_start) not in mine]
        published = memo.build(gpu, profiles, inventory, foreign=foreign, extensions=extensions)
        devices.extend(published.devices)
        counter_sets.append(published.counter_set)
    memo.end_call()
    counter_sets.sort(key=lambda counter_set: device_sort_key(counter_set.name))
    return NodeDevices(in_name_order(devices, inventory.node_name), counter_sets)
