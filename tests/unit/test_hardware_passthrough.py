"""Moving a GPU to vfio-pci and back: the simulated node (NVML loses and regains the GPU) through the NVML
backend's checks, and the sysfs writes of the real bus against a fake sysfs tree (no real vfio-pci here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudra.errors import HardwareInUse, HardwareInvalidArgument, HardwareNotFound
from gpudra.hardware.nvml.pcibus import SysfsPciBus
from gpudra.hardware.simulated import FakeNvml, simulated_backend
from gpudra.hardware.simulated.fake_nvml_base import FakeNvmlBase


def test_a_gpu_bound_to_vfio_leaves_nvml_and_comes_back_when_given_back() -> None:
    node = simulated_backend("dgx-h100", "n1")
    backend = node.backend
    before = backend.read_inventory()
    target = before.gpus[2]
    bound = backend.bind_vfio(target.pci_bus_id)
    assert (bound.driver, bound.iommu_group) == ("vfio-pci", int(target.pci_bus_id.split(":")[1], 16))
    during = backend.read_inventory()
    assert target.uuid not in {gpu.uuid for gpu in during.gpus}
    assert [gpu.minor for gpu in during.gpus] == [0, 1, 3, 4, 5, 6, 7]  # NVML indices close up
    assert [g.driver for g in backend.pci_gpus()].count("vfio-pci") == 1
    assert backend.bind_vfio(target.pci_bus_id).driver == "vfio-pci"  # again: nothing to do
    assert backend.unbind_vfio(target.pci_bus_id).driver == "nvidia"
    assert backend.read_inventory() == before
    assert backend.unbind_vfio(target.pci_bus_id).driver == "nvidia"  # again: nothing to do


def test_a_gpu_running_processes_is_not_taken_from_them() -> None:
    node = simulated_backend("dgx-h100", "n1")
    gpu = node.backend.read_inventory().gpus[0]
    node.nvml.set_processes(0, 2)
    with pytest.raises(HardwareInUse, match="runs 2 compute processes"):
        node.backend.bind_vfio(gpu.pci_bus_id)
    assert node.backend.pci_gpus()[0].driver == "nvidia"


def test_a_gpu_with_mig_instances_is_not_bound() -> None:
    node = simulated_backend("dgx-a100", "n1")
    gpu = node.backend.read_inventory().gpus[0]
    with pytest.raises(HardwareInUse, match="MIG instances"):
        node.backend.bind_vfio(gpu.pci_bus_id)


def test_unknown_addresses_and_foreign_drivers_are_refused() -> None:
    node = simulated_backend("dgx-h100", "n1")
    with pytest.raises(HardwareNotFound):
        node.backend.bind_vfio("0000:ff:00.0")
    bus = node.backend.pci_gpus()[0].pci_bus_id
    node.nvml._all[0].driver = "nouveau"  # a driver gpudra could not give the GPU back to: it stays
    with pytest.raises(HardwareInvalidArgument, match="nouveau"):
        node.backend.bind_vfio(bus)


def test_the_binding_survives_an_agent_restart(tmp_path: Path) -> None:
    node = simulated_backend("dgx-h100", "n1")
    node.nvml.persist_to(tmp_path / "state")
    bus = node.backend.pci_gpus()[5].pci_bus_id
    node.backend.bind_vfio(bus)
    again = FakeNvml.load(tmp_path / "state", keep_persisting=False)
    assert isinstance(again, FakeNvmlBase)
    assert [g.driver for g in again.pci_bus.gpus()][5] == "vfio-pci"
    again.nvmlInit()
    assert again.nvmlDeviceGetCount() == 7


def _sysfs(root: Path) -> Path:
    """A fake /sys with one NVIDIA GPU on the nvidia driver, one audio function, one other vendor's device."""
    devices = root / "bus" / "pci" / "devices"
    drivers = root / "bus" / "pci" / "drivers"
    for driver in ("nvidia", "vfio-pci"):
        (drivers / driver).mkdir(parents=True)
        (drivers / driver / "bind").write_text("")
        (drivers / driver / "unbind").write_text("")
    (root / "kernel" / "iommu_groups" / "27").mkdir(parents=True)
    for address, vendor, cls, device in (
        ("0000:1b:00.0", "0x10de", "0x030200", "0x2330"),
        ("0000:1b:00.1", "0x10de", "0x040300", "0x22a3"),
        ("0000:05:00.0", "0x8086", "0x020000", "0x1572"),
    ):
        path = devices / address
        path.mkdir(parents=True)
        for name, value in (("vendor", vendor), ("class", cls), ("device", device), ("numa_node", "1")):
            (path / name).write_text(value + "\n")
        (path / "driver_override").write_text("(null)\n")
        bar = "0x00000000e0000000 0x00000000e0ffffff 0x0000000000040200\n"
        (path / "resource").write_text(bar + "0x0 0x0 0x0\n" * 5)
    gpu = devices / "0000:1b:00.0"
    (gpu / "driver").symlink_to(drivers / "nvidia")
    (gpu / "iommu_group").symlink_to(root / "kernel" / "iommu_groups" / "27")
    return gpu


def test_sysfs_lists_nvidia_gpus_with_driver_group_and_memory(tmp_path: Path) -> None:
    _sysfs(tmp_path)
    (gpu,) = SysfsPciBus(tmp_path).gpus()
    assert (gpu.pci_bus_id, gpu.pci_device_id, gpu.driver, gpu.iommu_group, gpu.numa_node) == (
        "0000:1b:00.0", 0x233010DE, "nvidia", 27, 1,
    )  # fmt: skip
    assert gpu.addressable_memory_bytes == 16 << 20


def test_sysfs_rebinding_unbinds_then_overrides_then_binds(tmp_path: Path) -> None:
    gpu = _sysfs(tmp_path)
    SysfsPciBus(tmp_path).set_driver("0000:1b:00.0", "vfio-pci")
    drivers = tmp_path / "bus" / "pci" / "drivers"
    assert (drivers / "nvidia" / "unbind").read_text() == "0000:1b:00.0"
    assert (gpu / "driver_override").read_text() == "vfio-pci"
    assert (drivers / "vfio-pci" / "bind").read_text() == "0000:1b:00.0"


def test_an_xid_names_its_gpu_while_another_is_on_vfio() -> None:
    """Binding GPU 0 moves the NVML indices of the GPUs after it down by one: the event still names GPU 2."""
    node = simulated_backend("dgx-h100", "n1")
    backend = node.backend
    uuids = [gpu.uuid for gpu in backend.read_inventory().gpus]
    assert backend.wait_health_event(0) is None  # the event set watches all eight
    backend.bind_vfio(backend.pci_gpus()[0].pci_bus_id)
    assert [gpu.uuid for gpu in backend.read_inventory().gpus] == uuids[1:]
    node.nvml.inject_xid(2, 79)
    event = backend.wait_health_event(0)
    assert event is not None
    assert (event.gpu_uuid, event.gpu_index, event.xid) == (uuids[2], 1, 79)
    assert backend.read_inventory().gpus[1].uuid == uuids[2]


def test_a_gpu_given_back_by_vfio_is_watched_again() -> None:
    node = simulated_backend("dgx-h100", "n1")
    backend = node.backend
    uuid = backend.read_inventory().gpus[0].uuid
    bus = backend.pci_gpus()[0].pci_bus_id
    backend.bind_vfio(bus)
    assert backend.wait_health_event(0) is None  # registered without GPU 0
    backend.unbind_vfio(bus)
    assert backend.wait_health_event(0) is None  # registered again, with it
    node.nvml.inject_xid(0, 48)
    event = backend.wait_health_event(0)
    assert event is not None
    assert (event.gpu_uuid, event.gpu_index, event.xid) == (uuid, 0, 48)


def test_a_handle_keeps_naming_its_gpu_when_an_earlier_one_leaves_nvml() -> None:
    node = simulated_backend("dgx-h100", "n1")
    nvml = node.nvml
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(3)
    uuid, minor = nvml.nvmlDeviceGetUUID(handle), nvml.nvmlDeviceGetMinorNumber(handle)
    node.backend.bind_vfio(node.backend.pci_gpus()[1].pci_bus_id)
    assert (nvml.nvmlDeviceGetUUID(handle), nvml.nvmlDeviceGetMinorNumber(handle)) == (uuid, minor)
    assert nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(2)) == uuid  # its NVML index moved
    assert [g.minor for g in node.backend.read_inventory().gpus] == [
        0,
        2,
        3,
        4,
        5,
        6,
        7,
    ]  # /dev/nvidiaN keeps N
