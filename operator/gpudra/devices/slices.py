"""Devices -> the ResourceSlice specs of one node's pool.

One pool per node, named after the node; every slice carries the same generation and the number of slices in
the pool (``resourceSliceCount``), so a consumer can tell a complete pool from one being rewritten. A pool
always has at least one slice, even without devices: an empty slice says "this node has nothing", which
differs from "this node has not reported yet".

Shared counters (partitionable devices, used by dynamic MIG) are laid out in one of two ways:
- ``CounterLayout.V1_34``: a counter set lives in the same slice as the devices that consume it;
- ``CounterLayout.V1_35``: counter sets live in counters-only slices, devices in slices without counters,
  and device slices hold at most 64 devices when any device of the pool has taints or consumes counters.
Static MIG and full GPUs use no counters, so both layouts give the same slices for them.

A slice that holds a list-typed attribute (DRAListTypeAttributes) holds at most 64 devices too, in either layout,
as kube-apiserver requires.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TypeVar

from gpudra.api.dra import CounterSet, Device, ResourcePool, ResourceSliceSpec
from gpudra.errors import InvalidInputError

MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_WITH_TAINTS_OR_COUNTERS = 64
MAX_COUNTER_SETS_PER_SLICE = 8

_T = TypeVar("_T")


class CounterLayout(enum.StrEnum):
    """Where shared counters go, by Kubernetes version (resource.k8s.io/v1 changed this incompatibly)."""

    V1_34 = "1.34"
    V1_35 = "1.35"


def counter_layout_for(major: int, minor: int) -> CounterLayout:
    """The layout a Kubernetes API server of this version accepts."""
    return CounterLayout.V1_35 if (major, minor) >= (1, 35) else CounterLayout.V1_34


def _chunks(items: Sequence[_T], size: int) -> list[list[_T]]:
    return [list(items[start : start + size]) for start in range(0, len(items), size)]


def _needs_small_slices(device: Device) -> bool:
    return bool(device.taints) or bool(device.consumes_counters) or _has_list_attributes(device)


def _has_list_attributes(device: Device) -> bool:
    return any(attribute.is_list for attribute in (device.attributes or {}).values())


def _device_groups(
    devices: Sequence[Device], counter_sets: Sequence[CounterSet], layout: CounterLayout, limit: int
) -> list[tuple[list[CounterSet], list[Device]]]:
    """(counter sets, devices) per slice, before the pool fields are filled in."""
    known = {counter_set.name for counter_set in counter_sets}
    if len(known) != len(counter_sets):
        raise InvalidInputError("counter set names must be unique within a pool")
    for device in devices:
        for consumption in device.consumes_counters or ():
            if consumption.counter_set not in known:
                raise InvalidInputError(
                    f"device {device.name} consumes counter set {consumption.counter_set}, not in the pool"
                )
    if layout is CounterLayout.V1_35:
        groups: list[tuple[list[CounterSet], list[Device]]] = [
            (chunk, []) for chunk in _chunks(counter_sets, MAX_COUNTER_SETS_PER_SLICE)
        ]
        if any(_needs_small_slices(device) for device in devices):
            limit = min(limit, MAX_DEVICES_WITH_TAINTS_OR_COUNTERS)
        groups.extend(([], chunk) for chunk in _chunks(devices, limit))
        return groups
    # 1.34: each counter set travels with the devices that consume it; a device may consume from one set only.
    if any(_has_list_attributes(device) for device in devices):
        limit = min(limit, MAX_DEVICES_WITH_TAINTS_OR_COUNTERS)
    by_set: dict[str, list[Device]] = {counter_set.name: [] for counter_set in counter_sets}
    plain: list[Device] = []
    for device in devices:
        sets = {consumption.counter_set for consumption in device.consumes_counters or ()}
        if len(sets) > 1:
            raise InvalidInputError(
                f"device {device.name} consumes from several counter sets; the 1.34 layout cannot hold that"
            )
        if sets:
            by_set[sets.pop()].append(device)
        else:
            plain.append(device)
    groups = []
    for counter_set in counter_sets:
        members = by_set[counter_set.name]
        if len(members) > limit:
            raise InvalidInputError(
                f"counter set {counter_set.name} has {len(members)} consumers; a slice holds at most {limit}"
            )
        groups.append(([counter_set], members))
    groups.extend(([], chunk) for chunk in _chunks(plain, limit))
    return groups


def build_slice_specs(
    *,
    node_name: str,
    driver: str,
    devices: Sequence[Device],
    generation: int,
    max_devices_per_slice: int = MAX_DEVICES_PER_SLICE,
    layout: CounterLayout = CounterLayout.V1_35,
    counter_sets: Sequence[CounterSet] = (),
) -> list[ResourceSliceSpec]:
    """Split ``devices`` (kept in the given order) into the slices of the node's pool.

    Raises InvalidInputError for a limit outside 1..128, a negative generation, duplicate device or counter
    set names, a device consuming an unpublished counter set, or counters the chosen layout cannot express.
    """
    if not 1 <= max_devices_per_slice <= MAX_DEVICES_PER_SLICE:
        raise InvalidInputError(
            f"max_devices_per_slice must be 1..{MAX_DEVICES_PER_SLICE}, not {max_devices_per_slice}"
        )
    if generation < 0:
        raise InvalidInputError(f"a pool generation cannot be negative ({generation})")
    names = [device.name for device in devices]
    if len(set(names)) != len(names):
        duplicates = sorted({name for name in names if names.count(name) > 1})
        raise InvalidInputError(f"device names must be unique in a pool; repeated: {', '.join(duplicates)}")
    groups = _device_groups(devices, counter_sets, layout, max_devices_per_slice) or [([], [])]
    pool = ResourcePool(name=node_name, generation=generation, resource_slice_count=len(groups))
    return [
        ResourceSliceSpec(
            driver=driver,
            pool=pool.model_copy(),
            node_name=node_name,
            devices=None if group_sets and not group_devices else list(group_devices),
            shared_counters=list(group_sets) or None,
        )
        for group_sets, group_devices in groups
    ]
