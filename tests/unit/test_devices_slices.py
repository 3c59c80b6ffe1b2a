"""Devices -> ResourceSlice specs: slice sizes, pool bookkeeping and the two counter layouts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpudra.api.dra import (
    Counter,
    CounterSet,
    Device,
    DeviceAttribute,
    DeviceCounterConsumption,
    DeviceTaint,
)
from gpudra.devices.slices import CounterLayout, build_slice_specs
from gpudra.errors import InvalidInputError

DRIVER = "gpu.nvidia.com"


def devices(n: int) -> list[Device]:
    return [Device(name=f"gpu-{i}", attributes={"type": DeviceAttribute(string="gpu")}) for i in range(n)]


@pytest.mark.parametrize(
    ("count", "sizes"),
    [(0, [0]), (1, [1]), (128, [128]), (129, [128, 1]), (300, [128, 128, 44])],
)
def test_devices_are_split_into_slices_of_at_most_128(count: int, sizes: list[int]) -> None:
    specs = build_slice_specs(node_name="node-a", driver=DRIVER, devices=devices(count), generation=3)
    assert [len(spec.devices or []) for spec in specs] == sizes
    for spec in specs:
        assert spec.driver == DRIVER
        assert spec.node_name == "node-a"
        assert (spec.pool.name, spec.pool.generation, spec.pool.resource_slice_count) == (
            "node-a",
            3,
            len(sizes),
        )
        assert spec.shared_counters is None


def test_device_order_is_kept_across_slices() -> None:
    given = devices(300)
    specs = build_slice_specs(node_name="n", driver=DRIVER, devices=given, generation=1)
    assert [d.name for spec in specs for d in spec.devices or []] == [d.name for d in given]


def test_an_empty_node_still_has_one_slice_on_the_wire() -> None:
    (spec,) = build_slice_specs(node_name="n", driver=DRIVER, devices=[], generation=0)
    assert spec.to_wire() == {
        "driver": DRIVER,
        "pool": {"name": "n", "generation": 0, "resourceSliceCount": 1},
        "nodeName": "n",
        "devices": [],
    }


def test_a_smaller_limit_gives_more_slices() -> None:
    specs = build_slice_specs(
        node_name="n", driver=DRIVER, devices=devices(10), generation=1, max_devices_per_slice=4
    )
    assert [len(spec.devices or []) for spec in specs] == [4, 4, 2]


@pytest.mark.parametrize("limit", [0, 129])
def test_a_limit_outside_the_api_range_is_rejected(limit: int) -> None:
    with pytest.raises(InvalidInputError, match="max_devices_per_slice"):
        build_slice_specs(node_name="n", driver=DRIVER, devices=[], generation=1, max_devices_per_slice=limit)


def test_duplicate_device_names_are_rejected() -> None:
    with pytest.raises(InvalidInputError, match="gpu-0"):
        build_slice_specs(node_name="n", driver=DRIVER, devices=devices(1) * 2, generation=1)


def _partitions(gpu: int, n: int) -> tuple[CounterSet, list[Device]]:
    counter_set = CounterSet(name=f"gpu-{gpu}-counter-set", counters={"memory": Counter(value="80Gi")})
    consumption = DeviceCounterConsumption(
        counter_set=counter_set.name, counters={"memory": Counter(value="10Gi")}
    )
    parts = [Device(name=f"gpu-{gpu}-part-{i}", consumes_counters=[consumption]) for i in range(n)]
    return counter_set, parts


def test_layout_135_puts_counters_in_their_own_slice_and_caps_device_slices_at_64() -> None:
    set0, parts0 = _partitions(0, 50)
    set1, parts1 = _partitions(1, 50)
    specs = build_slice_specs(
        node_name="n",
        driver=DRIVER,
        devices=parts0 + parts1,
        generation=2,
        layout=CounterLayout.V1_35,
        counter_sets=[set0, set1],
    )
    assert [(len(spec.shared_counters or []), len(spec.devices or [])) for spec in specs] == [
        (2, 0),
        (0, 64),
        (0, 36),
    ]
    assert specs[0].devices is None
    assert {spec.pool.resource_slice_count for spec in specs} == {3}


def test_layout_134_keeps_each_counter_set_with_its_consumers() -> None:
    set0, parts0 = _partitions(0, 3)
    set1, parts1 = _partitions(1, 2)
    plain = devices(1)
    specs = build_slice_specs(
        node_name="n",
        driver=DRIVER,
        devices=parts0 + plain + parts1,
        generation=2,
        layout=CounterLayout.V1_34,
        counter_sets=[set0, set1],
    )
    layout = [
        ([c.name for c in spec.shared_counters or []], [d.name for d in spec.devices or []]) for spec in specs
    ]
    assert layout == [
        (["gpu-0-counter-set"], ["gpu-0-part-0", "gpu-0-part-1", "gpu-0-part-2"]),
        (["gpu-1-counter-set"], ["gpu-1-part-0", "gpu-1-part-1"]),
        ([], ["gpu-0"]),
    ]


def test_tainted_devices_cap_slices_at_64_in_layout_135() -> None:
    tainted = [
        d.model_copy(update={"taints": [DeviceTaint(key="gpu.nvidia.com/xid", effect="NoSchedule")]})
        for d in devices(100)
    ]
    specs = build_slice_specs(node_name="n", driver=DRIVER, devices=tainted, generation=1)
    assert [len(spec.devices or []) for spec in specs] == [64, 36]


def test_consuming_an_unpublished_counter_set_is_rejected() -> None:
    _, parts = _partitions(0, 1)
    with pytest.raises(InvalidInputError, match="gpu-0-counter-set"):
        build_slice_specs(node_name="n", driver=DRIVER, devices=parts, generation=1)


@given(count=st.integers(min_value=0, max_value=600), limit=st.integers(min_value=1, max_value=128))
def test_any_split_keeps_every_device_once_in_order_within_the_limit(count: int, limit: int) -> None:
    given_devices = devices(count)
    specs = build_slice_specs(
        node_name="n", driver=DRIVER, devices=given_devices, generation=7, max_devices_per_slice=limit
    )
    assert len(specs) == max(1, -(-count // limit))
    assert all(len(spec.devices or []) <= limit for spec in specs)
    assert [d.name for spec in specs for d in spec.devices or []] == [d.name for d in given_devices]
    assert {(spec.pool.generation, spec.pool.resource_slice_count) for spec in specs} == {(7, len(specs))}


@pytest.mark.parametrize("layout", [CounterLayout.V1_34, CounterLayout.V1_35])
@pytest.mark.parametrize(
    ("count", "with_list", "sizes"),
    [(100, False, [100]), (100, True, [64, 36]), (64, True, [64]), (200, True, [64, 64, 64, 8])],
)
def test_a_slice_with_list_attributes_holds_at_most_64_devices(
    layout: CounterLayout, count: int, with_list: bool, sizes: list[int]
) -> None:
    published = devices(count)
    if with_list:
        listed = {"gpudra.dev/nvlinkPeers": DeviceAttribute(strings=["GPU-0"])}
        published[0] = published[0].model_copy(
            update={"attributes": {**(published[0].attributes or {}), **listed}}
        )
    specs = build_slice_specs(node_name="n", driver=DRIVER, devices=published, generation=1, layout=layout)
    assert [len(spec.devices or []) for spec in specs] == sizes
