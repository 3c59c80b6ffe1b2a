"""Passthrough devices: what each GPU offers for vfio-pci, and that the scheduler never gets a GPU's passthrough
device together with its container use (through the allocator with the shipped DeviceClasses and real CEL)."""

from __future__ import annotations

import uuid

import pytest
from _allocator_kit import claim, device_class, make_allocator, req

from gpudra.allocator import Allocation, Failure
from gpudra.api.dra import Device, ResourceSlice
from gpudra.api.meta import ObjectMeta
from gpudra.devices.classes import load_device_classes
from gpudra.devices.dynamic import NodeDevices, build_node_devices
from gpudra.devices.passthrough import with_passthrough
from gpudra.devices.sharing import time_sliced
from gpudra.devices.slices import CounterLayout, build_slice_specs
from gpudra.hardware.gpus.inventory import NodeInventory, PciGpu
from gpudra.hardware.simulated import simulated_backend

NODE = "n1"


def reading(profile: str = "dgx-h100") -> tuple[NodeInventory, tuple[PciGpu, ...]]:
    backend = simulated_backend(profile, NODE).backend
    return backend.read_inventory(), backend.pci_gpus()


def offered(inventory: NodeInventory, pci: tuple[PciGpu, ...], replicas: int = 0) -> NodeDevices:
    built = build_node_devices(inventory, {})
    return with_passthrough(
        NodeDevices(time_sliced(built.devices, replicas), built.counter_sets), inventory, pci
    )


def named(devices: list[Device]) -> dict[str, Device]:
    return {device.name: device for device in devices}


def attrs(device: Device) -> dict[str, object]:
    return {name: a.value for name, a in (device.attributes or {}).items()}


def counter_set(device: Device) -> str | None:
    consumption = device.consumes_counters or []
    return consumption[0].counter_set if consumption else None


def test_every_gpu_is_offered_for_passthrough_with_nvidias_attributes() -> None:
    inventory, pci = reading()
    devices = named(offered(inventory, pci).devices)
    vfio = [name for name in devices if name.startswith("gpu-vfio-")]
    assert vfio == [f"gpu-vfio-{i}" for i in range(8)]
    first = pci[0]
    assert attrs(devices["gpu-vfio-0"]) == {
        "type": "vfio",
        "uuid": str(uuid.uuid5(uuid.NAMESPACE_DNS, first.pci_bus_id)),
        "deviceID": "0x2330",
        "vendorID": "0x10de",
        "productName": "NVIDIA H100 80GB HBM3",
        "iommuFDEnabled": False,
        "resource.kubernetes.io/pciBusID": first.pci_bus_id,
        "resource.kubernetes.io/pcieRoot": first.pcie_root,
        "resource.kubernetes.io/numaNode": first.numa_node,
    }
    assert (
        devices["gpu-vfio-0"].capacity is not None and "addressableMemory" in devices["gpu-vfio-0"].capacity
    )


def test_a_gpu_and_its_passthrough_device_consume_the_same_single_counter() -> None:
    inventory, pci = reading()
    result = offered(inventory, pci)
    devices = named(result.devices)
    gpu = next(g for g in inventory.gpus if g.pci_bus_id == pci[3].pci_bus_id)
    assert (
        counter_set(devices[f"gpu-{gpu.minor}"])
        == counter_set(devices["gpu-vfio-3"])
        == "gpu-vfio-3-counter-set"
    )
    sets = {s.name: {n: c.value for n, c in s.counters.items()} for s in result.counter_sets}
    assert sets["gpu-vfio-3-counter-set"] == {"gpu": "1"}
    assert len(sets) == 8


def test_a_gpu_bound_to_vfio_offers_only_its_passthrough_device() -> None:
    node = simulated_backend("dgx-h100", NODE)
    pci = node.backend.pci_gpus()
    node.backend.bind_vfio(pci[1].pci_bus_id)
    inventory, now = node.backend.read_inventory(), node.backend.pci_gpus()
    devices = named(offered(inventory, now).devices)
    assert "gpu-1" not in devices  # gone from NVML with the GPU
    assert counter_set(devices["gpu-vfio-1"]) == "gpu-vfio-1-counter-set"
    assert attrs(devices["gpu-vfio-1"])["resource.kubernetes.io/pciBusID"] == pci[1].pci_bus_id


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"iommu_group": None}, "no IOMMU group: cannot be passed through"),
        ({"driver": None}, "no driver bound: gpudra could not give it back"),
        ({"driver": "nouveau"}, "another driver"),
    ],
)
def test_gpus_that_cannot_be_passed_through_are_not_offered(change: dict[str, object], why: str) -> None:
    inventory, pci = reading()
    changed = (pci[0].model_copy(update=change), *pci[1:])
    devices = named(offered(inventory, changed).devices)
    assert "gpu-vfio-0" not in devices, why
    assert "gpu-vfio-1" in devices
    assert devices["gpu-0"].consumes_counters is None


def test_gpus_in_mig_mode_are_not_offered_for_passthrough() -> None:
    inventory, pci = reading("dgx-a100")  # MIG on, all-balanced instances
    assert not [d for d in offered(inventory, pci).devices if d.name.startswith("gpu-vfio")]


# -------------------------------------------------------------------- through the allocator


def slices(devices: NodeDevices, layout: CounterLayout) -> list[ResourceSlice]:
    specs = build_slice_specs(
        node_name=NODE, driver="gpu.nvidia.com", devices=devices.devices, generation=1, layout=layout,
        counter_sets=devices.counter_sets,
    )  # fmt: skip
    return [ResourceSlice(metadata=ObjectMeta(name=f"{NODE}-{i}"), spec=s) for i, s in enumerate(specs)]


def on_bus(bus_id: str) -> str:
    return f'device.attributes["resource.kubernetes.io"].pciBusID == "{bus_id}"'


@pytest.mark.parametrize("layout", list(CounterLayout))
@pytest.mark.parametrize("first", ["vfio", "gpu"])
def test_passthrough_and_container_use_of_one_gpu_are_never_allocated_together(
    layout: CounterLayout, first: str
) -> None:
    inventory, pci = reading()
    bus = pci[2].pci_bus_id
    allocator = make_allocator(slices(offered(inventory, pci), layout), load_device_classes(), real_cel=True)
    classes = {"vfio": "vfio.gpu.nvidia.com", "gpu": "gpu.nvidia.com"}
    second = "gpu" if first == "vfio" else "vfio"
    outcome = allocator.allocate(NODE, [claim("a", req("r", classes[first], on_bus(bus)))])
    assert isinstance(outcome, Allocation), outcome
    allocator.commit(outcome)
    refused = allocator.allocate(NODE, [claim("b", req("r", classes[second], on_bus(bus)))])
    assert isinstance(refused, Failure) and refused.reason == "CounterExhausted", refused
    other = allocator.allocate(NODE, [claim("c", req("r", classes[second], on_bus(pci[3].pci_bus_id)))])
    assert isinstance(other, Allocation), other
    both = allocator.allocate(NODE, [claim("d", req("v", "vfio.gpu.nvidia.com", on_bus(pci[4].pci_bus_id)),
                                             req("g", "gpu.nvidia.com", on_bus(pci[4].pci_bus_id)))])  # fmt: skip
    assert isinstance(both, Failure)


def test_a_time_shared_gpu_takes_many_tenants_but_no_passthrough_beside_them() -> None:
    inventory, pci = reading()
    bus = pci[0].pci_bus_id
    published = offered(inventory, pci, replicas=4)
    any_device = device_class("any", "true")
    allocator = make_allocator(
        slices(published, CounterLayout.V1_35), [*load_device_classes(), any_device], real_cel=True
    )
    shared = 'device.attributes["gpudra.dev"].sharing == "TimeSlicing" && ' + on_bus(bus)
    for name in ("t1", "t2"):
        outcome = allocator.allocate(NODE, [claim(name, req("r", "any", shared))])
        assert isinstance(outcome, Allocation), outcome
        allocator.commit(outcome)
    refused = allocator.allocate(NODE, [claim("vm", req("r", "vfio.gpu.nvidia.com", on_bus(bus)))])
    assert isinstance(refused, Failure) and refused.reason == "CounterExhausted", refused
