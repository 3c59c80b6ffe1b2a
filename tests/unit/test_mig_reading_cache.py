"""Reading a MIG-partitioned GPU again: an instance the last reading found is not asked about again (a dgx-h100 with
seven instances per GPU took about 850 NVML calls a reading, and every prepare reads the node), while an instance
destroyed, created, or seen under another GPU index is read as it is now."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from gpudra.errors import HardwareError
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.hardware.simulated import nvml_types as t
from gpudra.hardware.simulated.fake_nvml import FakeNvml

DETAIL_CALLS = (
    "nvmlDeviceGetGpuInstanceById",
    "nvmlGpuInstanceGetInfo",
    "nvmlComputeInstanceGetInfo",
    "nvmlDeviceGetGpuInstanceProfileInfo",
)


class Counting:
    """The simulated binding, counting the calls made through it."""

    def __init__(self, fake: FakeNvml) -> None:
        self._fake = fake
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._fake, name)
        if name.startswith("nvml") and callable(value):

            def counted(*args: Any) -> Any:
                self.calls[name] += 1
                return value(*args)

            return counted
        return value


def partitioned() -> tuple[FakeNvml, NvmlBackend]:
    fake = FakeNvml.from_profile("dgx-h100", node_name="n")
    setup = NvmlBackend("n", nvml=fake)
    for gpu in (0, 1):
        setup.set_mig_mode(gpu, True)
        for start in range(7):
            setup.create_mig_device(gpu, "1g.10gb", start)
    return fake, setup


def detail_calls(binding: Counting) -> int:
    return sum(binding.calls[c] for c in DETAIL_CALLS)


def test_a_second_reading_of_unchanged_instances_does_not_ask_for_their_details_again() -> None:
    fake, _ = partitioned()
    binding = Counting(fake)
    reader = NvmlBackend("n", nvml=binding)

    first = reader.read_inventory()
    asked_first = detail_calls(binding)
    binding.calls.clear()
    second = reader.read_inventory()

    assert asked_first > 0
    assert detail_calls(binding) == 0
    assert second.gpus == first.gpus
    assert sum(len(g.mig_devices) for g in second.gpus) == 14


def test_instances_destroyed_and_created_since_the_last_reading_are_read_as_they_are_now() -> None:
    fake, setup = partitioned()
    reader = NvmlBackend("n", nvml=fake)
    before = next(g for g in reader.read_inventory().gpus if g.index == 0)
    for device in before.mig_devices[:4]:  # placements 0 to 3 (its memory slices) become one 3g.40gb at 0
        setup.destroy_mig_device(0, device.gi_id)
    created = setup.create_mig_device(0, "3g.40gb", 0)

    after = next(g for g in reader.read_inventory().gpus if g.index == 0)

    assert [d.profile for d in after.mig_devices] == ["3g.40gb"] + ["1g.10gb"] * 3
    assert after.mig_devices[0] == created
    assert after.mig_devices[0].multiprocessors > before.mig_devices[0].multiprocessors
    assert {d.uuid for d in after.mig_devices[1:]} == {d.uuid for d in before.mig_devices[4:]}
    assert after == NvmlBackend("n", nvml=fake).read_inventory().gpus[0]  # as a fresh reader reads it


class ProfilesOnlyWithMig:
    """The simulated binding, listing no GPU instance profiles while the GPU's MIG mode is off (as NVML may)."""

    def __init__(self, fake: FakeNvml) -> None:
        self._fake = fake

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fake, name)

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: Any, constant: int) -> Any:
        if not self._fake.nvmlDeviceGetMigMode(handle)[0]:
            raise t.NVMLError_NotSupported("MIG is off")
        return self._fake.nvmlDeviceGetGpuInstanceProfileInfo(handle, constant)


def test_a_create_refused_while_mig_was_off_does_not_stop_creates_once_it_is_on() -> None:
    backend = NvmlBackend("n", nvml=ProfilesOnlyWithMig(FakeNvml.from_profile("dgx-h100", node_name="n")))
    with pytest.raises(HardwareError, match="no MIG profile"):
        backend.create_mig_device(2, "1g.10gb", 0)
    backend.set_mig_mode(2, True)

    created = backend.create_mig_device(2, "1g.10gb", 0)

    assert created.profile == "1g.10gb"
    assert [d.uuid for d in backend.read_inventory().gpus[2].mig_devices] == [created.uuid]
