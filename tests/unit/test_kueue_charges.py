"""What Kueue charges for gpudra's devices, as docs/kueue.md says: a dynamic MIG device by the counters it consumes
(counter source ``memory`` / ``multiprocessors``), a static MIG device by count (it consumes no counters), and a
time-sliced GPU by ``capacity.requests`` rounded by the published request policy, or the policy's default when the
claim names no capacity. The charge Kueue computes must equal what the scheduler consumes (the allocator's
consumedCapacity), or quota and placement disagree."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from _allocator_kit import claim, device_class, make_allocator, picked, req, slice_
from _dynamic_kit import node

from gpudra.allocator import Allocation
from gpudra.api.dra import Device
from gpudra.api.quantity import parse_quantity
from gpudra.devices.build import build_devices
from gpudra.devices.dynamic import build_node_devices
from gpudra.devices.sharing import SHARES_CAPACITY, time_sliced
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.hardware.simulated.fake_nvml import FakeNvml

MI = 1 << 20


def counter_charge(device: Device, counter: str) -> int:
    """Kueue's counter source: the device's consumesCounters value of that counter (absent: inadmissible)."""
    (consumption,) = device.consumes_counters or []
    return int(parse_quantity(consumption.counters[counter].value))


def capacity_charge(device: Device, name: str, requested: str | None) -> int:
    """Kueue's capacity source: the request rounded up by the device's requestPolicy, or its default."""
    capacity = (device.capacity or {})[name]
    policy = capacity.request_policy
    assert policy is not None and policy.valid_range is not None
    if requested is None:
        assert policy.default is not None
        return int(parse_quantity(policy.default))
    low = parse_quantity(policy.valid_range.min)
    step = parse_quantity(policy.valid_range.step or "1")
    amount = max(parse_quantity(requested), low)
    return int(low + step * math.ceil((amount - low) / step))


def h100_devices() -> dict[str, Device]:
    inventory, profiles = node("dgx-h100")
    return {d.name: d for d in build_node_devices(inventory, profiles).devices}


@pytest.mark.parametrize(
    ("device", "memory_mi", "multiprocessors"),
    [("gpu-0-mig-1g10gb-19-0", 9984, 16), ("gpu-0-mig-3g40gb-9-4", 40448, 60), ("gpu-0", 81559, 132)],
)
def test_dynamic_mig_devices_are_charged_their_memory_and_multiprocessors(
    device: str, memory_mi: int, multiprocessors: int
) -> None:
    published = h100_devices()[device]
    assert counter_charge(published, "memory") == memory_mi * MI
    assert counter_charge(published, "multiprocessors") == multiprocessors
    # the capacity a selector reads says the same as the counter Kueue charges
    assert int(parse_quantity((published.capacity or {})["memory"].value)) == memory_mi * MI


def test_static_mig_devices_consume_no_counters_so_kueue_counts_them() -> None:
    inventory = NvmlBackend("n", nvml=FakeNvml.from_profile("dgx-a100", node_name="n")).read_inventory()
    migs = [d for d in build_devices(inventory) if "-mig-" in d.name]
    assert migs and all(d.consumes_counters is None for d in migs)


def l4_shared(replicas: int) -> Device:
    inventory = NvmlBackend("n", nvml=FakeNvml.from_profile("l4x4", node_name="n")).read_inventory()
    return time_sliced(build_devices(inventory), replicas)[0]


@pytest.mark.parametrize(
    ("requested", "charged_mi"),
    [(None, 5758), ("10Gi", 10240), ("1500Mi", 1500), ("1000000000", 954), ("1", 1)],
)
def test_shared_gpu_memory_charge_matches_what_the_scheduler_consumes(
    requested: str | None, charged_mi: int
) -> None:
    shared = l4_shared(4)  # 23034Mi over 4 replicas
    assert capacity_charge(shared, "memory", requested) == charged_mi * MI
    allocator = make_allocator([slice_("n", [shared])], [device_class("shared.gpu.nvidia.com", None)])
    capacity = {"memory": requested} if requested is not None else None
    outcome = allocator.allocate("n", [claim("c", req("gpu", "shared.gpu.nvidia.com", capacity=capacity))])
    assert isinstance(outcome, Allocation), outcome
    (result,) = picked(outcome)
    consumed = {k: parse_quantity(v) for k, v in (result.consumed_capacity or {}).items()}
    assert consumed == {"memory": Fraction(charged_mi * MI), SHARES_CAPACITY: Fraction(1)}


def test_shared_gpu_takes_at_most_its_replicas_and_partitionable_gpus_are_never_shared() -> None:
    shared = l4_shared(3)
    allocator = make_allocator([slice_("n", [shared])], [device_class("shared.gpu.nvidia.com", None)])
    tenants = [
        claim(f"c{i}", req("gpu", "shared.gpu.nvidia.com", capacity={"memory": "1Mi"})) for i in range(4)
    ]
    placed = []
    for tenant in tenants:
        outcome = allocator.allocate("n", [tenant])
        if isinstance(outcome, Allocation):
            allocator.snapshot.mark_allocated(outcome.claims[0].result)  # as the scheduler records it
        placed.append(outcome)
    assert [isinstance(o, Allocation) for o in placed] == [True, True, True, False]
    dynamic = h100_devices()
    assert time_sliced(list(dynamic.values()), 4) == list(dynamic.values())
