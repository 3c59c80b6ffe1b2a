"""What prepare creates for a dynamic MIG allocation, and what it refuses, before touching the hardware."""

from __future__ import annotations

from functools import cache

import pytest

from gpudra.agent.checkpoint import MigInstanceRecord
from gpudra.agent.migdynamic.decisions import claimed_placements, plan_instances
from gpudra.api.dra import DeviceRequestAllocationResult
from gpudra.errors import PrepareError
from gpudra.hardware.gpus.backend import MigProfileInfo
from gpudra.hardware.gpus.inventory import GpuInfo, NodeInventory
from gpudra.hardware.simulated import simulated_backend

NODE = "n1"


@cache
def hardware() -> tuple[NodeInventory, tuple[MigProfileInfo, ...]]:
    """An H100 node: GPU 0 with MIG on and a 3g.40gb at 4, GPU 1 with MIG on and nothing, the rest MIG off."""
    backend = simulated_backend("dgx-h100", NODE).backend
    backend.set_mig_mode(0, True)
    backend.set_mig_mode(1, True)
    backend.create_mig_device(0, "3g.40gb", 4)
    return backend.read_inventory(), backend.mig_profiles(0)


def plan(*devices: str, dynamic: tuple[int, ...] = (0, 1)) -> list[tuple[int, str, int]]:
    inventory, profiles = hardware()

    def profiles_of(gpu: GpuInfo) -> tuple[MigProfileInfo, ...]:
        return profiles

    results = [
        DeviceRequestAllocationResult(request="r", driver="gpu.nvidia.com", pool=NODE, device=d)
        for d in devices
    ]
    uuids = {inventory.gpus[i].uuid for i in dynamic}
    return [
        (c.gpu_index, c.record.profile, c.record.placement_start)
        for c in plan_instances(results, inventory, uuids, profiles_of)
    ]


@pytest.mark.parametrize(
    ("devices", "dynamic", "expected"),
    [
        (["gpu-1-mig-1g10gb-19-3"], (0, 1), [(1, "1g.10gb", 3)]),
        (["gpu-0-mig-2g20gb-14-2", "gpu-1-mig-7g80gb-0-0"], (0, 1), [(0, "2g.20gb", 2), (1, "7g.80gb", 0)]),
        (["gpu-0-mig-3g40gb-9-4"], (0, 1), []),  # exists already: used as it is
        (["gpu-1-mig-1g10gb-19-3"], (0,), []),  # not a dynamic GPU: a static device
        (["gpu-1", "gpu-2"], (0, 1), []),  # whole GPUs without instances
    ],
    ids=["one", "two-gpus", "existing", "static-gpu", "whole-gpus"],
)
def test_instances_to_create(
    devices: list[str], dynamic: tuple[int, ...], expected: list[tuple[int, str, int]]
) -> None:
    assert plan(*devices, dynamic=dynamic) == expected


@pytest.mark.parametrize(
    ("device", "reason", "words"),
    [
        ("gpu-0-mig-2g20gb-14-4", "PlacementOccupied", "memory slices [4, 6)"),
        ("gpu-0-mig-1g10gb-19-7", "UnknownDevice", "no MIG profile id 19 at placement 7"),
        ("gpu-0-mig-5g50gb-99-0", "UnknownDevice", "no MIG profile id 99"),
        ("gpu-0", "GpuPartitioned", "3g.40gb@4"),
    ],
)
def test_refusals_name_the_reason(device: str, reason: str, words: str) -> None:
    with pytest.raises(PrepareError) as caught:
        plan(device)
    assert caught.value.reason == reason and words in str(caught.value)


def test_claimed_placements_group_records_by_gpu() -> None:
    records = [
        MigInstanceRecord(parent_uuid="GPU-a", profile="1g.10gb", placement_start=0),
        MigInstanceRecord(parent_uuid="GPU-b", profile="7g.80gb", placement_start=0, gpu_instance_id=1),
        MigInstanceRecord(parent_uuid="GPU-a", profile="2g.20gb", placement_start=2),
    ]
    assert claimed_placements(records) == {
        "GPU-a": [("1g.10gb", 0), ("2g.20gb", 2)],
        "GPU-b": [("7g.80gb", 0)],
    }
