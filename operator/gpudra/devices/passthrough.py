"""Passthrough (NVIDIA's PassthroughSupport gate): every whole GPU offered a second time, as a device a virtual
machine gets through vfio-pci (KubeVirt), and never both at once.

The passthrough device of the GPU at position ``i`` of the node's GPUs in PCI address order is ``gpu-vfio-<i>``
with NVIDIA's attributes: ``type = "vfio"`` (selected by the ``vfio.gpu.nvidia.com`` DeviceClass), ``uuid`` (a
name-based UUID of the PCI address, the same across restarts and bindings), ``deviceID`` and ``vendorID``
("0x2330", "0x10de"), ``productName``, ``iommuFDEnabled`` (always false: gpudra uses the legacy
/dev/vfio/<group> interface), ``resource.kubernetes.io/pciBusID``, ``pcieRoot`` and ``numaNode`` when known,
and capacity ``addressableMemory``.

Never offered together with the GPU's container use: NVIDIA's driver stops publishing the other kind once one
is prepared, which leaves a window in which the scheduler allocates both. Here the two are partitionable devices
(KEP-4815) sharing one counter: counter set ``gpu-vfio-<i>-counter-set`` holds ``gpu: 1``, and both the GPU's
``gpu-<minor>`` device (exclusive or time-shared; counters are charged once for all its shares) and
``gpu-vfio-<i>`` consume it, so the scheduler allocates at most one of them. While vfio-pci holds the GPU, NVML
does not see it, so its container device is not published at all; the passthrough device and its counter set
stay.

Offered only for a GPU that can be given away: MIG mode off (as NVIDIA: a GPU with MIG is not offered), in an
IOMMU group, held by the nvidia driver (or already by vfio-pci). Pure: devices in, devices out.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from gpudra.api.dra import (
    Counter,
    CounterSet,
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceCounterConsumption,
)
from gpudra.api.quantity import format_quantity
from gpudra.devices.build import NUMA_NODE, PCI_BUS_ID, PCIE_ROOT, in_name_order
from gpudra.devices.dynamic import NodeDevices
from gpudra.devices.names import device_sort_key, gpu_device_name, vfio_device_name
from gpudra.hardware.gpus.inventory import NodeInventory, PciGpu
from gpudra.hardware.gpus.pcinames import NVIDIA_DRIVER, VFIO_DRIVER

TYPE_VFIO = "vfio"
COUNTER = "gpu"


def passthrough_uuid(pci_bus_id: str) -> str:
    """The ``uuid`` attribute of a passthrough device: derived from the PCI address as NVIDIA's driver does."""
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, pci_bus_id))


def counter_set_name(pci_index: int) -> str:
    return f"gpu-vfio-{pci_index}-counter-set"


def _consumes(pci_index: int) -> list[DeviceCounterConsumption]:
    return [
        DeviceCounterConsumption(
            counter_set=counter_set_name(pci_index), counters={COUNTER: Counter(value="1")}
        )
    ]


def vfio_device(gpu: PciGpu, pci_index: int) -> Device:
    """The ``gpu-vfio-<i>`` device of a GPU, consuming its passthrough counter."""
    attrs = {
        "type": DeviceAttribute(string=TYPE_VFIO),
        "uuid": DeviceAttribute(string=passthrough_uuid(gpu.pci_bus_id)),
        "deviceID": DeviceAttribute(string=f"{gpu.pci_device_id >> 16:#06x}"),
        "vendorID": DeviceAttribute(string=f"{gpu.pci_device_id & 0xFFFF:#06x}"),
        "productName": DeviceAttribute(string=gpu.product_name or ""),
        "iommuFDEnabled": DeviceAttribute(bool_=False),
        PCI_BUS_ID: DeviceAttribute(string=gpu.pci_bus_id),
    }
    if gpu.pcie_root is not None:
        attrs[PCIE_ROOT] = DeviceAttribute(string=gpu.pcie_root)
    if gpu.numa_node is not None:
        attrs[NUMA_NODE] = DeviceAttribute(int_=gpu.numa_node)
    return Device(
        name=vfio_device_name(pci_index),
        attributes=attrs,
        capacity={"addressableMemory": DeviceCapacity(value=format_quantity(gpu.addressable_memory_bytes))},
        consumes_counters=_consumes(pci_index),
    )


def in_pci_order(pci_gpus: Sequence[PciGpu]) -> list[PciGpu]:
    """The GPUs by PCI address: position ``i`` is the ``gpu-vfio-<i>`` device."""
    return sorted(pci_gpus, key=lambda gpu: gpu.pci_bus_id)


def with_passthrough(
    offered: NodeDevices, inventory: NodeInventory, pci_gpus: Sequence[PciGpu]
) -> NodeDevices:
    """``offered`` plus a passthrough device (and its counter set) for every GPU that can be passed through,
    with the GPU's own device consuming the same counter. InvalidInputError as build_devices."""
    on_nvidia = {gpu.pci_bus_id: gpu for gpu in inventory.gpus}
    devices = list(offered.devices)
    position = {device.name: n for n, device in enumerate(devices)}
    counter_sets = list(offered.counter_sets)
    for pci_index, pci in enumerate(in_pci_order(pci_gpus)):
        if pci.iommu_group is None or pci.driver not in (NVIDIA_DRIVER, VFIO_DRIVER):
            continue
        if pci.driver == NVIDIA_DRIVER:
            gpu = on_nvidia.get(pci.pci_bus_id)
            n = position.get(gpu_device_name(gpu.minor)) if gpu is not None and not gpu.mig_enabled else None
            if n is None or devices[n].consumes_counters:
                continue  # MIG on, lost, or already partitioned: not offered
            devices[n] = devices[n].model_copy(update={"consumes_counters": _consumes(pci_index)})
        devices.append(vfio_device(pci, pci_index))
        counter_sets.append(
            CounterSet(name=counter_set_name(pci_index), counters={COUNTER: Counter(value="1")})
        )
    counter_sets.sort(key=lambda counter_set: device_sort_key(counter_set.name))
    return NodeDevices(in_name_order(devices, inventory.node_name), counter_sets)
