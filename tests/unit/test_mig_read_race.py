"""A MIG device destroyed while the agent reads the GPU (another claim's unprepare, between two NVML calls of the
reading) is gone from the reading; it used to leave the whole GPU out of the inventory, so that unprepare of the
next claim on it failed with "NVML cannot read a GPU now"."""

from __future__ import annotations

from typing import Any

from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.hardware.simulated.fake_nvml import FakeNvml


class DestroyedWhileRead:
    """The simulated binding, with one MIG device destroyed just before the reader asks for its compute instance."""

    def __init__(self, fake: FakeNvml, other: NvmlBackend, gpu_index: int) -> None:
        self._fake, self._other, self._gpu_index = fake, other, gpu_index
        self.destroyed: int | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fake, name)

    def nvmlGpuInstanceGetComputeInstanceById(self, gi: Any, ci_id: int) -> Any:
        if self.destroyed is None:
            self.destroyed = int(self._fake.nvmlGpuInstanceGetInfo(gi).id)
            self._other.destroy_mig_device(self._gpu_index, self.destroyed)
        return self._fake.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id)


def test_a_mig_device_destroyed_during_the_reading_is_left_out_and_the_gpu_kept() -> None:
    fake = FakeNvml.from_profile("dgx-h100", node_name="n")
    setup = NvmlBackend("n", nvml=fake)
    setup.set_mig_mode(0, True)
    for start in (0, 1, 2):
        setup.create_mig_device(0, "1g.10gb", start)
    binding = DestroyedWhileRead(fake, setup, 0)

    inventory = NvmlBackend("n", nvml=binding).read_inventory()

    gpu = next(g for g in inventory.gpus if g.index == 0)
    assert binding.destroyed is not None
    assert len(gpu.mig_devices) == 2
    assert binding.destroyed not in {m.gi_id for m in gpu.mig_devices}
    assert inventory.problems == ()
