"""The PCI bus through sysfs: which NVIDIA GPUs the node has, which kernel driver holds each, and moving a GPU
between the nvidia and vfio-pci drivers (passthrough, :mod:`gpudra.devices.passthrough`).

The sysfs writes are the kernel's documented interface, in the order NVIDIA's go-nvlib uses: clear
``driver_override`` and write the address to ``<device>/driver/unbind``, then write the new driver's name to
``driver_override`` and the address to ``/sys/bus/pci/drivers/<driver>/bind``. This module is NOT exercised on
real hardware by gpudra's tests (the machines have no IOMMU to give away): the simulated bus
(:mod:`gpudra.hardware.simulated.pcibus`) stands in for it, and :class:`SysfsPciBus` is tested against a fake
sysfs tree only. It does not load the vfio-pci module, pick a vendor's vfio variant driver, or move the GPU's
audio function along with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from gpudra.errors import HardwareError
from gpudra.hardware.gpus.inventory import PciGpu
from gpudra.hardware.gpus.pcinames import NVIDIA_VENDOR

_GPU_CLASSES = ("0x0300", "0x0302")  # VGA controller, 3D controller
_MEMORY_RESOURCE = 0x200  # IORESOURCE_MEM in the flags column of <device>/resource


class PciBus(Protocol):
    """What the backend needs of the PCI bus."""

    def gpus(self) -> tuple[PciGpu, ...]:
        """Every NVIDIA GPU on the bus, in PCI address order."""
        ...

    def set_driver(self, pci_bus_id: str, driver: str) -> None:
        """Unbind the device from its driver and bind it to ``driver``."""
        ...


def _read(path: Path) -> str:
    return path.read_text().strip()


def _link_name(path: Path) -> str | None:
    try:
        return path.readlink().name
    except OSError:
        return None


def _memory_bytes(resource: Path) -> int:
    """The sizes of the memory BARs (lines 0..5 of ``resource``: start end flags, in hex)."""
    total = 0
    try:
        lines = resource.read_text().splitlines()[:6]
    except OSError:
        return 0
    for line in lines:
        start, end, flags = (int(part, 16) for part in line.split())
        if flags & _MEMORY_RESOURCE and end > start:
            total += end - start + 1
    return total


class SysfsPciBus:
    """:class:`PciBus` over ``<sysfs>/bus/pci``."""

    def __init__(self, sysfs: Path = Path("/sys")) -> None:
        self.devices = sysfs / "bus" / "pci" / "devices"
        self.drivers = sysfs / "bus" / "pci" / "drivers"

    def gpus(self) -> tuple[PciGpu, ...]:
        found = []
        try:
            entries = sorted(self.devices.iterdir())
        except OSError as exc:
            raise HardwareError(f"cannot list {self.devices}: {exc}") from exc
        for device in entries:
            try:
                if int(_read(device / "vendor"), 16) != NVIDIA_VENDOR:
                    continue
                if not _read(device / "class").startswith(_GPU_CLASSES):
                    continue
                group = _link_name(device / "iommu_group")
                numa = int(_read(device / "numa_node")) if (device / "numa_node").exists() else -1
                found.append(
                    PciGpu(
                        pci_bus_id=device.name,
                        pci_device_id=(int(_read(device / "device"), 16) << 16) | NVIDIA_VENDOR,
                        driver=_link_name(device / "driver"),
                        iommu_group=int(group) if group is not None else None,
                        numa_node=numa if numa >= 0 else None,
                        pcie_root=next((p for p in device.resolve().parts if p.startswith("pci")), None),
                        addressable_memory_bytes=_memory_bytes(device / "resource"),
                    )
                )
            except (OSError, ValueError) as exc:
                raise HardwareError(f"cannot read PCI device {device.name}: {exc}") from exc
        return tuple(found)

    def set_driver(self, pci_bus_id: str, driver: str) -> None:
        device = self.devices / pci_bus_id
        try:
            (device / "driver_override").write_text("\n")
            if (device / "driver").exists():
                (device / "driver" / "unbind").write_text(pci_bus_id)
            (device / "driver_override").write_text(driver)
            (self.drivers / driver / "bind").write_text(pci_bus_id)
        except OSError as exc:
            raise HardwareError(f"cannot bind PCI device {pci_bus_id} to {driver}: {exc}") from exc
