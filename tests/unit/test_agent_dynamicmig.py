"""What prepare creates for a dynamic MIG allocation, and what it refuses, before touching the hardware; the
reading it plans with after creating; what unprepare destroys, and with which NVML calls."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest

from gpudra.agent.cdi import ClaimSpecDir
from gpudra.agent.checkpoint import MigInstanceRecord
from gpudra.agent.claimeffects import ClaimEffects
from gpudra.agent.migdynamic.decisions import InstanceCreation, claimed_placements, plan_instances
from gpudra.agent.migdynamic.instances import MigInstances, with_instances
from gpudra.api.dra import DeviceRequestAllocationResult
from gpudra.errors import HardwareError, PrepareError
from gpudra.hardware.gpus.backend import GpuInstanceInfo, MigProfileInfo
from gpudra.hardware.gpus.inventory import GpuInfo, NodeInventory
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.hardware.simulated import simulated_backend
from gpudra.hardware.simulated.fake_nvml import FakeNvml
from gpudra.testing import HeldCall, eventually

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


def test_a_reading_with_the_created_instances_is_what_reading_the_gpus_again_shows() -> None:
    backend = simulated_backend("dgx-h100", NODE).backend
    for gpu in (0, 1):
        backend.set_mig_mode(gpu, True)
    backend.create_mig_device(0, "3g.40gb", 4)
    before = backend.read_inventory()
    created = [backend.create_mig_device(0, "1g.10gb", 0), backend.create_mig_device(1, "2g.20gb", 2)]
    assert with_instances(before, created) == backend.read_inventory()
    assert with_instances(before, []) is before


def test_unprepare_destroys_what_the_reading_shows_and_lists_instances_only_for_a_bare_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeNvml.from_profile("dgx-h100", node_name=NODE)
    backend = NvmlBackend(NODE, nvml=fake)
    backend.set_mig_mode(0, True)
    shown = backend.create_mig_device(0, "1g.10gb", 0)
    monkeypatch.setattr(fake, "nvmlGpuInstanceCreateComputeInstance", lambda *args: 0)  # no compute instance
    with pytest.raises(HardwareError):  # a GPU instance whose compute instance never came (a killed process)
        backend.create_mig_device(0, "1g.10gb", 1)
    monkeypatch.undo()
    listed = []
    gpu_instances = backend.gpu_instances

    def listing(index: int) -> tuple[GpuInstanceInfo, ...]:
        listed.append(index)
        return gpu_instances(index)

    monkeypatch.setattr(backend, "gpu_instances", listing)
    reading = backend.read_inventory()
    records = [
        MigInstanceRecord(
            parent_uuid=shown.parent_uuid, profile="1g.10gb", placement_start=0,
            gpu_instance_id=shown.gi_id, compute_instance_id=shown.ci_id, uuid=shown.uuid,
        )
    ]  # fmt: skip
    MigInstances(backend).destroy("uid", records, reading)
    assert listed == [] and not backend.read_inventory().gpus[0].mig_devices

    bare = [MigInstanceRecord(parent_uuid=shown.parent_uuid, profile="1g.10gb", placement_start=1)]
    assert [i.placement_start for i in gpu_instances(0)] == [1]
    MigInstances(backend).destroy("uid", bare, backend.read_inventory())
    assert listed == [0] and gpu_instances(0) == ()


async def test_creations_go_on_while_every_default_worker_thread_is_busy(tmp_path: Path) -> None:
    # 56 prepares at once: creations wait for NVML one after another, and must not hold the threads that the
    # claims' checkpoint and CDI writes need meanwhile (nor wait for them)
    backend = simulated_backend("dgx-h100", NODE).backend
    backend.set_mig_mode(1, True)
    gpu = backend.read_inventory().gpus[1]
    effects = ClaimEffects(backend, ClaimSpecDir(tmp_path))
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
    held = HeldCall(lambda: None, hold=30)  # a slow file write holding the only default thread
    writing = asyncio.ensure_future(asyncio.to_thread(held))
    await eventually(held.entered.is_set, what="the default thread taken")
    try:
        record = MigInstanceRecord(parent_uuid=gpu.uuid, profile="1g.10gb", placement_start=3)
        (created,) = await asyncio.wait_for(
            effects.create_instances("uid", [InstanceCreation(gpu.index, record)]), timeout=10
        )
        assert created.record.uuid == created.device.uuid
        assert [m.uuid for m in backend.read_inventory().gpus[1].mig_devices] == [created.device.uuid]
    finally:
        held.release.set()
        await writing
