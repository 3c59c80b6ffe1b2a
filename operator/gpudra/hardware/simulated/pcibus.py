"""The simulated node's PCI bus: the kernel driver each GPU is bound to, and the move to vfio-pci and back.

A GPU on vfio-pci is gone from the simulated NVML (count, indices, UUID lookups), as on a real node, and comes
back with its MIG mode but default compute mode and time slice (the nvidia driver set it up afresh). The IOMMU
group is the GPU's PCI bus number (each GPU of the node profiles sits on a bus of its own).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudra.errors import HardwareError
from gpudra.hardware.gpus.inventory import PciGpu
from gpudra.hardware.gpus.pcinames import NVIDIA_DRIVER, VFIO_DRIVER

if TYPE_CHECKING:
    from gpudra.hardware.simulated.fake_nvml_base import FakeNvmlBase


class SimulatedPciBus:
    """:class:`gpudra.hardware.nvml.pcibus.PciBus` over a FakeNvml's GPUs."""

    def __init__(self, nvml: FakeNvmlBase) -> None:
        self._nvml = nvml

    def gpus(self) -> tuple[PciGpu, ...]:
        with self._nvml._lock:
            gpus = sorted(self._nvml._all, key=lambda gpu: gpu.slot.pci_bus_id)
            return tuple(
                PciGpu(
                    pci_bus_id=gpu.slot.pci_bus_id,
                    pci_device_id=gpu.model.pci_device_id,
                    driver=gpu.driver,
                    iommu_group=int(gpu.slot.pci_bus_id.split(":")[1], 16),
                    numa_node=gpu.slot.numa_node,
                    pcie_root=gpu.slot.pcie_root,
                    product_name=gpu.model.product_name,
                    addressable_memory_bytes=gpu.model.memory_bytes,
                )
                for gpu in gpus
            )

    def set_driver(self, pci_bus_id: str, driver: str) -> None:
        if driver not in (NVIDIA_DRIVER, VFIO_DRIVER):
            raise HardwareError(f"the simulated node has no PCI driver {driver!r}")
        nvml = self._nvml
        with nvml._lock:
            gpu = next((g for g in nvml._all if g.slot.pci_bus_id == pci_bus_id), None)
            if gpu is None:
                raise HardwareError(f"no PCI device {pci_bus_id} on the simulated node")
            if gpu.driver == driver:
                return
            if nvml.bind_fails(gpu.index, driver):
                gpu.driver = None  # the unbind from the old driver worked, the bind did not
                nvml._gpus = nvml._on_nvidia()
                nvml._persist()
                raise HardwareError(f"cannot bind PCI device {pci_bus_id} to {driver}: injected by a test")
            gpu.driver = driver
            if driver == NVIDIA_DRIVER:
                gpu.compute_mode = 0
                gpu.time_slice = 0
            nvml._gpus = nvml._on_nvidia()
            nvml._persist()
