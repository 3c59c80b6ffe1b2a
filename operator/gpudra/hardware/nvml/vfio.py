"""Passthrough through the PCI bus and NVML: listing a node's GPUs whichever driver holds them, and moving one
between the nvidia driver and vfio-pci.

Used by :class:`gpudra.hardware.nvml.backend.NvmlBackend`. The PCI bus is sysfs on a real node
(:class:`gpudra.hardware.nvml.pcibus.SysfsPciBus`) and the simulation's bus under FakeNvml; the checks before a
bind (no compute processes, no MIG instances) ask NVML, so they run the same on both. A GPU's product name comes
from NVML while the nvidia driver holds it, else from the GPU catalog by its PCI device id.
"""

from __future__ import annotations

from collections.abc import Callable

from gpudra.errors import HardwareError, HardwareInUse, HardwareInvalidArgument, HardwareNotFound
from gpudra.hardware.gpus.catalog import load_catalog
from gpudra.hardware.gpus.inventory import NodeInventory, PciGpu
from gpudra.hardware.gpus.pcinames import NVIDIA_DRIVER, VFIO_DRIVER
from gpudra.hardware.nvml.mig import NvmlCalls
from gpudra.hardware.nvml.pcibus import PciBus


class VfioOperations:
    def __init__(self, calls: NvmlCalls, bus: PciBus, read_inventory: Callable[[], NodeInventory]) -> None:
        self._calls = calls
        self._bus = bus
        self._read_inventory = read_inventory

    def gpus(self, inventory: NodeInventory | None = None) -> tuple[PciGpu, ...]:
        """The bus's GPUs with a product name each (``inventory``: a reading to take names from)."""
        found = self._bus.gpus()
        if all(gpu.product_name for gpu in found):
            return found
        if inventory is None and any(gpu.driver == NVIDIA_DRIVER for gpu in found):
            inventory = self._read_inventory()
        names = {gpu.pci_bus_id: gpu.product_name for gpu in inventory.gpus} if inventory else {}
        catalog = load_catalog()
        named = []
        for gpu in found:
            name = gpu.product_name or names.get(gpu.pci_bus_id)
            if name is None:
                model = catalog.by_pci_device_id(gpu.pci_device_id)
                name = model.product_name if model is not None else f"NVIDIA {gpu.pci_device_id >> 16:#06x}"
            named.append(gpu.model_copy(update={"product_name": name}))
        return tuple(named)

    def _find(self, pci_bus_id: str) -> PciGpu:
        gpu = next((g for g in self._bus.gpus() if g.pci_bus_id == pci_bus_id), None)
        if gpu is None:
            raise HardwareNotFound(
                f"no NVIDIA GPU at PCI address {pci_bus_id} on node {self._calls.node_name}"
            )
        return gpu

    def _check_idle(self, pci_bus_id: str) -> None:
        """HardwareInUse when the GPU runs compute processes or holds MIG instances."""
        inventory = self._read_inventory()
        gpu = next((g for g in inventory.gpus if g.pci_bus_id == pci_bus_id), None)
        unreadable = [problem for problem in inventory.problems if not problem.published]
        if gpu is None and unreadable:  # perhaps this one: whether it is idle cannot be known
            raise HardwareError(
                f"GPU {pci_bus_id} of node {self._calls.node_name} cannot be checked for MIG instances and "
                f"processes: {unreadable[0].message}"
            )
        if gpu is None:
            return  # the nvidia driver holds it but NVML does not list it (lost): nothing to ask
        where = f"GPU {gpu.uuid} ({pci_bus_id}) of node {self._calls.node_name}"
        if gpu.mig_devices:
            raise HardwareInUse(
                f"{where} has {len(gpu.mig_devices)} MIG instances; it cannot go to vfio-pci", code="IN_USE"
            )
        nvml = self._calls.nvml
        with self._calls.errors("list the compute processes", gpu.index):
            processes = nvml.nvmlDeviceGetComputeRunningProcesses(self._calls.handle(gpu.index))
        if processes:
            raise HardwareInUse(
                f"{where} runs {len(processes)} compute processes; it cannot go to vfio-pci", code="IN_USE"
            )

    def bind(self, pci_bus_id: str) -> PciGpu:
        gpu = self._find(pci_bus_id)
        if gpu.driver == VFIO_DRIVER:
            return gpu
        if gpu.driver != NVIDIA_DRIVER:
            raise HardwareInvalidArgument(
                f"GPU {pci_bus_id} of node {self._calls.node_name} is bound to {gpu.driver or 'no driver'}, "
                f"not {NVIDIA_DRIVER}; gpudra moves only GPUs it can give back"
            )
        self._check_idle(pci_bus_id)
        try:
            self._bus.set_driver(pci_bus_id, VFIO_DRIVER)
        except HardwareError as exc:
            self._back_to_nvidia(pci_bus_id, exc)
            raise
        return self._find(pci_bus_id)

    def _back_to_nvidia(self, pci_bus_id: str, cause: HardwareError) -> None:
        """A bind to vfio-pci failed, perhaps after the unbind from nvidia worked (NVIDIA's driver left GPUs with
        no driver this way): give the GPU back at once. When that fails too, say so: the GPU has no driver (so
        it is offered neither to containers nor for passthrough) until the claim's rollback gives it back."""
        if self._find(pci_bus_id).driver == NVIDIA_DRIVER:
            return
        try:
            self._bus.set_driver(pci_bus_id, NVIDIA_DRIVER)
        except HardwareError as exc:
            raise HardwareError(
                f"GPU {pci_bus_id} of node {self._calls.node_name} could not be bound to {VFIO_DRIVER} ({cause}) "
                f"nor given back to {NVIDIA_DRIVER} ({exc}); it has no driver until the claim's rollback gives "
                "it back"
            ) from cause

    def unbind(self, pci_bus_id: str) -> PciGpu:
        """Back to the nvidia driver from vfio-pci, or from no driver (a bind that failed halfway)."""
        gpu = self._find(pci_bus_id)
        if gpu.driver not in (VFIO_DRIVER, None):
            return gpu
        self._bus.set_driver(pci_bus_id, NVIDIA_DRIVER)
        return self._find(pci_bus_id)
