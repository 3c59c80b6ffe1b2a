"""Dynamic MIG publication: names, attributes and counters of partitionable devices, and what the allocator can
and cannot allocate from them (checked against mig/validate and the placement space of each model)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import pytest
from _allocator_kit import claim, make_allocator, picked, req
from _dynamic_kit import NODE, node
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra.allocator import Allocation, Failure
from gpudra.api.dra import Device, DeviceRequest, ResourceSlice
from gpudra.api.meta import ObjectMeta
from gpudra.api.quantity import parse_quantity
from gpudra.devices.dynamic import DynamicMemo, build_node_devices, gpu_counters, placement_counters
from gpudra.devices.slices import CounterLayout, build_slice_specs
from gpudra.hardware.gpus.backend import MigProfileInfo
from gpudra.hardware.gpus.inventory import NodeInventory
from gpudra.hardware.simulated import simulated_backend
from gpudra.mig.layout import MigLayout, Placement, model_of_gpu
from gpudra.mig.space import placement_space
from gpudra.mig.validate import layout_problems

MIG_PROFILES = ["dgx-h100", "dgx-a100", "dgx-a100-80gb", "hgx-h200", "dgx-b200", "gb200-nvl72", "a30x4"]


def attr(device: Device, name: str) -> object:
    return (device.attributes or {})[name].value


def consumed(device: Device) -> dict[str, int]:
    (consumption,) = device.consumes_counters or []
    return {name: int(parse_quantity(c.value)) for name, c in consumption.counters.items()}


def test_h100_publishes_every_profile_at_every_placement_plus_the_full_gpu() -> None:
    inventory, profiles = node()
    published = build_node_devices(inventory, profiles)
    gpu0 = [d for d in published.devices if d.name == "gpu-0" or d.name.startswith("gpu-0-")]
    assert [d.name for d in gpu0] == [
        "gpu-0",
        *(f"gpu-0-mig-1g10gb-19-{s}" for s in range(7)),
        *(f"gpu-0-mig-1g10gb-me-20-{s}" for s in range(7)),
        *(f"gpu-0-mig-1g20gb-15-{s}" for s in (0, 2, 4, 6)),
        *(f"gpu-0-mig-2g20gb-14-{s}" for s in (0, 2, 4)),
        "gpu-0-mig-3g40gb-9-0",
        "gpu-0-mig-3g40gb-9-4",
        "gpu-0-mig-4g40gb-5-0",
        "gpu-0-mig-7g80gb-0-0",
    ]
    assert len(published.devices) == 8 * 26
    assert [c.name for c in published.counter_sets] == [f"gpu-{i}-counter-set" for i in range(8)]


def test_dynamic_mig_device_has_the_static_attributes_but_no_uuid_and_consumes_its_slices() -> None:
    inventory, profiles = node()
    gpu = inventory.gpus[0]
    devices = {d.name: d for d in build_node_devices(inventory, profiles).devices}
    device = devices["gpu-0-mig-2g20gb-14-2"]
    assert attr(device, "type") == "mig" and attr(device, "profile") == "2g.20gb"
    assert attr(device, "parentUUID") == gpu.uuid
    assert attr(device, "productName") == "NVIDIA H100 80GB HBM3"
    assert "uuid" not in (device.attributes or {})
    assert set(device.capacity or {}) == {
        "multiprocessors", "copyEngines", "decoders", "encoders", "jpegEngines", "ofaEngines", "memory",
    }  # fmt: skip
    assert consumed(device) == {
        "multiprocessors": 32, "copy-engines": 2, "decoders": 2, "jpeg-engines": 2,
        "memory": 20096 * 2**20, "memory-slice-2": 1, "memory-slice-3": 1,
    }  # fmt: skip
    assert consumed(devices["gpu-0-mig-1g10gb-me-20-3"])["ofa-engines"] == 1
    full = devices["gpu-0"]
    assert attr(full, "type") == "gpu" and attr(full, "uuid") == gpu.uuid
    counters = published_counters(inventory, profiles)
    assert consumed(full) == {k: v for k, v in counters.items() if v}
    assert counters["ofa-engines"] == 1 and counters["memory-slice-7"] == 1


def published_counters(
    inventory: NodeInventory, profiles: dict[str, tuple[MigProfileInfo, ...]]
) -> dict[str, int]:
    first = build_node_devices(inventory, profiles).counter_sets[0]
    return {name: int(parse_quantity(c.value)) for name, c in first.counters.items()}


def test_gpus_not_in_dynamic_mode_publish_as_before() -> None:
    inventory, profiles = node()
    only_gpu1 = {inventory.gpus[1].uuid: profiles[inventory.gpus[1].uuid]}
    published = build_node_devices(inventory, only_gpu1)
    assert [c.name for c in published.counter_sets] == ["gpu-1-counter-set"]
    # MIG on without instances and not dynamic: nothing, exactly as static MIG publishes it
    assert not [d for d in published.devices if d.name.startswith(("gpu-0", "gpu-2"))]
    l4, l4_profiles = node("l4x4")
    plain = build_node_devices(l4, l4_profiles)
    assert [d.name for d in plain.devices] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"] and not plain.counter_sets


def test_foreign_instances_stay_static_and_hide_what_they_overlap_and_the_full_gpu() -> None:
    inventory, profiles = node()
    backend = simulated_backend("dgx-h100", NODE).backend
    backend.set_mig_mode(0, True)
    backend.create_mig_device(0, "3g.40gb", 4)  # left over from a static layout
    backend.create_mig_device(0, "1g.10gb", 0)  # created for a claim
    gpu0 = backend.read_inventory().gpus[0]
    with_leftover = inventory.model_copy(update={"gpus": (gpu0,)})
    published = build_node_devices(
        with_leftover, {gpu0.uuid: profiles[inventory.gpus[0].uuid]}, claimed={gpu0.uuid: [("1g.10gb", 0)]}
    )
    devices = {d.name: d for d in published.devices}
    hidden = {"gpu-0", "gpu-0-mig-1g10gb-19-5", "gpu-0-mig-7g80gb-0-0", "gpu-0-mig-2g20gb-14-4"}
    assert not hidden & set(devices)
    assert {"gpu-0-mig-1g10gb-19-0", "gpu-0-mig-3g40gb-9-0", "gpu-0-mig-2g20gb-14-2"} <= set(devices)
    leftover = devices["gpu-0-mig-3g40gb-9-4"]  # published as the static MIG device it is
    assert attr(leftover, "uuid") == next(m.uuid for m in gpu0.mig_devices if m.profile == "3g.40gb")
    assert not leftover.consumes_counters and "memorySlice7" in (leftover.capacity or {})
    assert devices["gpu-0-mig-1g10gb-19-0"].consumes_counters


def test_a_claimed_instance_reuses_the_gpus_build_and_a_foreign_one_rebuilds_it() -> None:
    inventory, profiles = node()
    backend = simulated_backend("dgx-h100", NODE).backend
    backend.set_mig_mode(0, True)
    memo = DynamicMemo()
    first = build_node_devices(inventory, profiles, memo=memo)
    backend.create_mig_device(0, "1g.10gb", 0)
    gpu0 = backend.read_inventory().gpus[0]
    created = inventory.model_copy(update={"gpus": (gpu0, *inventory.gpus[1:])})

    # created for a claim: nothing the GPU publishes changed, and nothing is built again
    claimed = build_node_devices(created, profiles, claimed={gpu0.uuid: [("1g.10gb", 0)]}, memo=memo)
    assert claimed == first
    assert all(a is b for a, b in zip(claimed.devices, first.devices, strict=True))

    # the same instance unclaimed is foreign: the GPU is built again, and as it would be without the memo
    foreign = build_node_devices(created, profiles, memo=memo)
    assert foreign == build_node_devices(created, profiles)
    assert "gpu-0" not in {d.name for d in foreign.devices}
    # and back: the build follows what the GPU publishes, never an older one
    assert build_node_devices(created, profiles, claimed={gpu0.uuid: [("1g.10gb", 0)]}, memo=memo) == first


def test_a_changed_driver_version_rebuilds_every_dynamic_gpu() -> None:
    inventory, profiles = node()
    memo = DynamicMemo()
    build_node_devices(inventory, profiles, memo=memo)
    upgraded = inventory.model_copy(update={"driver_version": "580.95.5"})
    published = build_node_devices(upgraded, profiles, memo=memo)
    assert published == build_node_devices(upgraded, profiles)
    assert {attr(d, "driverVersion") for d in published.devices} == {"580.95.5"}


@pytest.mark.parametrize("profile", MIG_PROFILES)
def test_counter_arithmetic_admits_exactly_the_valid_layouts(profile: str) -> None:
    """Every set of placements whose counters fit is a valid MIG layout (mig/validate), and every valid layout
    of the model (the placement space) fits: the counters neither allow too much nor forbid anything."""
    inventory, profiles = node(profile)
    gpu = inventory.gpus[0]
    capacity = gpu_counters(gpu, profiles[gpu.uuid])
    items = [
        (Placement(s, p.profile), placement_counters(p, s)) for p in profiles[gpu.uuid] for s in p.placements
    ]
    fitting: set[frozenset[Placement]] = set()

    def walk(i: int, used: dict[str, int], chosen: tuple[Placement, ...]) -> None:
        if i == len(items):
            fitting.add(frozenset(chosen))
            return
        walk(i + 1, used, chosen)
        placement, needs = items[i]
        if all(used.get(k, 0) + v <= capacity[k] for k, v in needs.items()):
            walk(i + 1, {k: used.get(k, 0) + needs.get(k, 0) for k in capacity}, (*chosen, placement))

    walk(0, {}, ())
    model = model_of_gpu(gpu)
    assert model is not None
    for placements in fitting:
        assert layout_problems(model, MigLayout(True, tuple(placements))) == []
    space = placement_space(model)
    valid = {frozenset(space.layout_of(bits).instances) for bits in space.layouts}
    assert fitting == valid
    full = capacity  # the full GPU consumes every counter: it fits only on an empty GPU
    assert all(any(full[k] + v > capacity[k] for k, v in needs.items() if v) for _, needs in items)


# -------------------------------------------------------------------- through the allocator


@cache
def slices(layout: CounterLayout) -> list[ResourceSlice]:
    inventory, profiles = node()
    published = build_node_devices(inventory, profiles)
    specs = build_slice_specs(
        node_name=NODE, driver="gpu.nvidia.com", devices=published.devices, generation=1, layout=layout,
        counter_sets=published.counter_sets,
    )  # fmt: skip
    return [ResourceSlice(metadata=ObjectMeta(name=f"{NODE}-{i}"), spec=s) for i, s in enumerate(specs)]


def profile_request(name: str, profile: str, count: int = 1) -> DeviceRequest:
    return req(
        name, "mig.nvidia.com", f'device.attributes["gpu.nvidia.com"].profile == "{profile}"', count=count
    )


def one_gpu() -> str:
    return 'device.attributes["gpu.nvidia.com"].parentUUID == "' + node()[0].gpus[0].uuid + '"'


@pytest.mark.parametrize("layout", list(CounterLayout))
def test_seven_1g_fill_a_gpu_and_the_eighth_is_refused_for_counters(layout: CounterLayout) -> None:
    allocator = make_allocator(slices(layout))
    for i in range(7):
        outcome = allocator.allocate(NODE, [claim(f"c{i}", req("m", "mig.nvidia.com", one_gpu()))])
        assert isinstance(outcome, Allocation), outcome
        allocator.commit(outcome)
    eighth = allocator.allocate(NODE, [claim("c8", req("m", "mig.nvidia.com", one_gpu()))])
    assert isinstance(eighth, Failure) and eighth.reason == "CounterExhausted"
    full = req(
        "g", "gpu.nvidia.com", 'device.attributes["gpu.nvidia.com"].uuid == "' + node()[0].gpus[0].uuid + '"'
    )
    assert isinstance(allocator.allocate(NODE, [claim("whole", full)]), Failure)


@pytest.mark.parametrize("layout", list(CounterLayout))
def test_full_gpu_and_a_mig_device_of_it_never_go_together(layout: CounterLayout) -> None:
    uuid = node()[0].gpus[0].uuid
    allocator = make_allocator(slices(layout))
    whole = req("g", "gpu.nvidia.com", f'device.attributes["gpu.nvidia.com"].uuid == "{uuid}"')
    outcome = allocator.allocate(NODE, [claim("both", whole, req("m", "mig.nvidia.com", one_gpu()))])
    assert isinstance(outcome, Failure) and outcome.reason == "CounterExhausted"
    first = allocator.allocate(NODE, [claim("whole", whole)])
    assert isinstance(first, Allocation)
    allocator.commit(first)
    assert isinstance(
        allocator.allocate(NODE, [claim("mig", req("m", "mig.nvidia.com", one_gpu()))]), Failure
    )


def allocated_layout(outcomes: Sequence[Allocation]) -> MigLayout:
    names = [
        r.device
        for o in outcomes
        for c in o.claims
        for r in (c.result.devices.results if c.result.devices else None) or []
    ]
    devices = {d.name: d for d in build_node_devices(*node()).devices}
    return MigLayout(
        True, tuple(Placement(int(n.rsplit("-", 1)[1]), str(attr(devices[n], "profile"))) for n in names)
    )


def h100_layouts() -> list[int]:
    model = model_of_gpu(node()[0].gpus[0])
    assert model is not None
    return sorted(placement_space(model).layouts)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(h100_layouts()))
def test_every_valid_h100_layout_is_allocatable_in_one_claim(bits: int) -> None:
    model = model_of_gpu(node()[0].gpus[0])
    assert model is not None
    layout = placement_space(model).layout_of(bits)
    requests = [profile_request(f"r{i}", p, n) for i, (p, n) in enumerate(sorted(layout.counts().items()))]
    if not requests:
        return
    outcome = make_allocator(slices(CounterLayout.V1_35)).allocate(
        NODE, [claim("all", *requests, constraints=None)]
    )
    assert isinstance(outcome, Allocation), f"{layout}: {outcome}"


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.sampled_from(["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
        max_size=9,
    )
)
def test_claims_one_by_one_always_leave_a_valid_layout_on_each_gpu(profiles: list[str]) -> None:
    allocator = make_allocator(slices(CounterLayout.V1_34))
    done: list[Allocation] = []
    for i, profile in enumerate(profiles):
        outcome = allocator.allocate(NODE, [claim(f"c{i}", profile_request("m", profile), constraints=None)])
        if isinstance(outcome, Allocation):
            allocator.commit(outcome)
            done.append(outcome)
    model = model_of_gpu(node()[0].gpus[0])
    assert model is not None
    by_gpu: dict[str, list[Allocation]] = {}
    for outcome in done:
        (result,) = picked(outcome)
        by_gpu.setdefault(result.device.split("-mig-")[0], []).append(outcome)
    for outcomes in by_gpu.values():
        assert layout_problems(model, allocated_layout(outcomes)) == []
