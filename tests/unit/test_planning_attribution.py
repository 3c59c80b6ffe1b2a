"""Allocated vs published GPU resources per node when a node publishes dynamic MIG: placements are alternatives,
so the node's capacity is its GPUs (their counter sets), not the sum of every placement."""

from __future__ import annotations

from gpudra.api.dra import ResourceClaim, ResourceSlice
from gpudra.devices.dynamic import build_node_devices
from gpudra.devices.slices import CounterLayout, build_slice_specs
from gpudra.hardware.simulated import empty_mig, simulated_backend
from gpudra.planning.attribution import node_usage, slice_counter_sets, slice_devices

NODE = "n1"
MIB = 2**20


def dynamic_h100_slices(layout: CounterLayout) -> list[ResourceSlice]:
    backend = simulated_backend("dgx-h100", NODE).backend
    empty_mig(backend)
    inventory = backend.read_inventory()
    published = build_node_devices(inventory, {g.uuid: backend.mig_profiles(g.index) for g in inventory.gpus})
    specs = build_slice_specs(
        node_name=NODE, driver="gpu.nvidia.com", devices=published.devices, generation=1, layout=layout,
        counter_sets=published.counter_sets,
    )  # fmt: skip
    return [ResourceSlice.model_validate(ResourceSlice(spec=spec).to_wire()) for spec in specs]


def allocated(*devices: str) -> ResourceClaim:
    results = [{"request": "r", "driver": "gpu.nvidia.com", "pool": NODE, "device": d} for d in devices]
    return ResourceClaim.model_validate(
        {"metadata": {"name": "c"}, "status": {"allocation": {"devices": {"results": results}}}}
    )


def test_dynamic_node_capacity_counts_gpus_and_allocation_counts_the_placement() -> None:
    for layout in CounterLayout:
        slices = dynamic_h100_slices(layout)
        devices = {k: v for s in slices for k, v in slice_devices(s).items()}
        sets = {k: v for s in slices for k, v in slice_counter_sets(s).items()}
        claims = [allocated("gpu-0-mig-1g10gb-19-3", "gpu-1-mig-3g40gb-9-4")]
        used, capacity = node_usage(claims, devices, sets)
        assert capacity[NODE] == {
            "devices": 8.0, "memory": 8 * 81559.0 * MIB, "multiprocessors": 8 * 132.0, "memory_slices": 64.0,
        }  # fmt: skip
        assert used[NODE] == {
            "devices": 2.0, "memory": (9984 + 40448) * MIB, "multiprocessors": 16.0 + 60.0, "memory_slices": 5.0,
        }  # fmt: skip
