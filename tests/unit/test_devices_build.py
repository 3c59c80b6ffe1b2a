"""Inventory -> devices: exactly the names, attributes and capacities NVIDIA's driver publishes."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.devices.build import build_devices, semver, skipped_gpus
from gpudra.devices.names import device_sort_key, mig_device_name, mig_profile_slug, parse_mig_device_name
from gpudra.errors import InvalidInputError
from gpudra.hardware.gpus.inventory import FabricInfo, GpuInfo, MigDeviceInfo, NodeInventory

MiB = 2**20
H100_UUID = "GPU-4f2b8c1e-0d3a-4b5c-9e7f-1a2b3c4d5e6f"
A100_UUID = "GPU-a100a100-0000-4000-8000-000000000001"
L4_UUID = "GPU-14141414-0000-4000-8000-000000000002"
CLUSTER = "9f0c4a52-3b1d-4e6f-8a7b-2c3d4e5f6a7b"


def h100(minor: int = 0, **changes: Any) -> GpuInfo:
    fields: dict[str, Any] = {
        "index": minor,
        "minor": minor,
        "uuid": H100_UUID,
        "product_name": "NVIDIA H100 80GB HBM3",
        "brand": "Nvidia",
        "architecture": "Hopper",
        "cuda_compute_capability": "9.0",
        "pci_bus_id": "0000:1a:00.0",
        "pci_device_id": 0x233010DE,
        "pcie_root": "pci0000:10",
        "numa_node": 0,
        "addressing_mode": "HMM",
        "memory_bytes": 81559 * MiB,
        "multiprocessors": 132,
        "mig_capable": True,
        "mig_enabled": False,
        "mig_pending": False,
        "nvlink_count": 18,
    }
    fields.update(changes)
    return GpuInfo(**fields)


def mig_1g5gb(
    start: int = 3, *, uuid: str = "MIG-1g5gb-0003", profile: str = "1g.5gb", gi: int = 19
) -> MigDeviceInfo:
    return MigDeviceInfo(
        uuid=uuid,
        parent_uuid=A100_UUID,
        parent_index=0,
        parent_minor=0,
        profile=profile,
        gi_profile_id=gi,
        ci_profile_id=0,
        gi_id=9,
        ci_id=0,
        placement_start=start,
        placement_size=1,
        memory_bytes=4864 * MiB,
        multiprocessors=14,
        copy_engines=1,
        decoders=0,
        encoders=0,
        jpeg_engines=0,
        ofa_engines=0,
    )


def a100_mig(*migs: MigDeviceInfo) -> GpuInfo:
    return GpuInfo(
        index=0,
        minor=0,
        uuid=A100_UUID,
        product_name="NVIDIA A100-SXM4-40GB",
        brand="Nvidia",
        architecture="Ampere",
        cuda_compute_capability="8.0",
        pci_bus_id="0000:07:00.0",
        pci_device_id=0x20B010DE,
        pcie_root="pci0000:00",
        numa_node=1,
        memory_bytes=40960 * MiB,
        multiprocessors=108,
        mig_capable=True,
        mig_enabled=True,
        mig_pending=True,
        mig_devices=migs,
        nvlink_count=12,
    )


def l4(minor: int = 0) -> GpuInfo:
    return GpuInfo(
        index=minor,
        minor=minor,
        uuid=L4_UUID,
        product_name="NVIDIA L4",
        brand="Nvidia",
        architecture="Ada Lovelace",
        cuda_compute_capability="8.9",
        pci_bus_id="0000:3b:00.0",
        pci_device_id=0x27B810DE,
        memory_bytes=23034 * MiB,
        multiprocessors=58,
        mig_capable=False,
        mig_enabled=False,
        mig_pending=False,
    )


def node(*gpus: GpuInfo) -> NodeInventory:
    return NodeInventory(
        node_name="node-a", driver_version="580.95.05", cuda_driver_version="13.0", gpus=gpus
    )


def s(value: str) -> dict[str, str]:
    return {"string": value}


def v(value: str) -> dict[str, str]:
    return {"version": value}


def q(value: str) -> dict[str, str]:
    return {"value": value}


COMMON_H100 = {
    "productName": s("NVIDIA H100 80GB HBM3"),
    "brand": s("Nvidia"),
    "architecture": s("Hopper"),
    "cudaComputeCapability": v("9.0.0"),
    "driverVersion": v("580.95.5"),
    "cudaDriverVersion": v("13.0.0"),
    "resource.kubernetes.io/pciBusID": s("0000:1a:00.0"),
    "resource.kubernetes.io/pcieRoot": s("pci0000:10"),
    "resource.kubernetes.io/numaNode": {"int": 0},
    "addressingMode": s("HMM"),
}

FULL_H100 = {
    "name": "gpu-0",
    "attributes": {
        "type": s("gpu"),
        "uuid": s(H100_UUID),
        **COMMON_H100,
        "gpudra.dev/nvlinkCount": {"int": 18},
    },
    "capacity": {"memory": q("81559Mi")},
}

A100_1G5GB = {
    "name": "gpu-0-mig-1g5gb-19-3",
    "attributes": {
        "type": s("mig"),
        "uuid": s("MIG-1g5gb-0003"),
        "parentUUID": s(A100_UUID),
        "profile": s("1g.5gb"),
        "productName": s("NVIDIA A100-SXM4-40GB"),
        "brand": s("Nvidia"),
        "architecture": s("Ampere"),
        "cudaComputeCapability": v("8.0.0"),
        "driverVersion": v("580.95.5"),
        "cudaDriverVersion": v("13.0.0"),
        "resource.kubernetes.io/pciBusID": s("0000:07:00.0"),
        "resource.kubernetes.io/pcieRoot": s("pci0000:00"),
        "resource.kubernetes.io/numaNode": {"int": 1},
    },
    "capacity": {
        "multiprocessors": q("14"),
        "copyEngines": q("1"),
        "decoders": q("0"),
        "encoders": q("0"),
        "jpegEngines": q("0"),
        "ofaEngines": q("0"),
        "memory": q("4864Mi"),
        "memorySlice3": q("1"),
    },
}

PLAIN_L4 = {
    "name": "gpu-0",
    "attributes": {
        "type": s("gpu"),
        "uuid": s(L4_UUID),
        "productName": s("NVIDIA L4"),
        "brand": s("Nvidia"),
        "architecture": s("Ada Lovelace"),
        "cudaComputeCapability": v("8.9.0"),
        "driverVersion": v("580.95.5"),
        "cudaDriverVersion": v("13.0.0"),
        "resource.kubernetes.io/pciBusID": s("0000:3b:00.0"),
        "gpudra.dev/nvlinkCount": {"int": 0},
    },
    "capacity": {"memory": q("23034Mi")},
}


@pytest.mark.parametrize(
    ("inventory", "expected"),
    [
        pytest.param(node(h100()), [FULL_H100], id="full H100 SXM"),
        pytest.param(node(a100_mig(mig_1g5gb())), [A100_1G5GB], id="A100-40GB MIG 1g.5gb"),
        pytest.param(node(l4()), [PLAIN_L4], id="L4 without MIG support"),
    ],
)
def test_devices_have_exactly_nvidias_attributes_and_capacities(
    inventory: NodeInventory, expected: list[dict[str, Any]]
) -> None:
    assert [device.to_wire() for device in build_devices(inventory)] == expected


def test_without_extensions_a_full_gpu_carries_only_nvidias_attributes() -> None:
    (device,) = build_devices(node(h100()), extensions=False)
    assert device.to_wire()["attributes"] == {"type": s("gpu"), "uuid": s(H100_UUID), **COMMON_H100}


def test_a_gpu_in_an_nvlink_clique_publishes_the_clique_id() -> None:
    fabric = FabricInfo(cluster_uuid=CLUSTER, clique_id=4, state=3, status=0)
    (device,) = build_devices(node(h100(fabric=fabric)))
    assert device.to_wire()["attributes"]["gpudra.dev/cliqueID"] == s(f"{CLUSTER}.4")


def test_a_gpu_with_a_zero_cluster_uuid_publishes_no_clique_id() -> None:
    fabric = FabricInfo(cluster_uuid="00000000-0000-0000-0000-000000000000", clique_id=0, state=3, status=0)
    (device,) = build_devices(node(h100(fabric=fabric)))
    assert "gpudra.dev/cliqueID" not in device.to_wire()["attributes"]


def test_a_mig_device_occupying_several_slices_has_one_capacity_per_slice() -> None:
    big = mig_1g5gb(start=4).model_copy(
        update={"profile": "3g.20gb", "gi_profile_id": 9, "placement_size": 4}
    )
    (device,) = build_devices(node(a100_mig(big)))
    assert device.name == "gpu-0-mig-3g20gb-9-4"
    slices = {
        key: value for key, value in device.to_wire()["capacity"].items() if key.startswith("memorySlice")
    }
    assert slices == {f"memorySlice{i}": q("1") for i in (4, 5, 6, 7)}


def test_a_mig_enabled_gpu_publishes_only_its_mig_devices_never_the_whole_gpu() -> None:
    devices = build_devices(node(a100_mig(mig_1g5gb(0, uuid="MIG-a"), mig_1g5gb(1, uuid="MIG-b"))))
    assert [device.name for device in devices] == ["gpu-0-mig-1g5gb-19-0", "gpu-0-mig-1g5gb-19-1"]
    assert all(device.to_wire()["attributes"]["type"] == s("mig") for device in devices)


def test_a_mig_enabled_gpu_without_instances_publishes_nothing_and_says_why() -> None:
    inventory = node(a100_mig(), l4(minor=1))
    assert [device.name for device in build_devices(inventory)] == ["gpu-1"]
    (skipped,) = skipped_gpus(inventory)
    assert (skipped.minor, skipped.uuid, skipped.reason) == (0, A100_UUID, "MigEnabledWithoutInstances")
    assert "no MIG instances" in skipped.message


def test_a_mig_capable_gpu_with_mig_off_is_a_full_gpu() -> None:
    (device,) = build_devices(node(h100(mig_capable=True, mig_enabled=False)))
    assert device.name == "gpu-0"
    assert skipped_gpus(node(h100())) == []


@pytest.mark.parametrize(
    ("parent", "profile", "gi", "start", "name"),
    [
        (0, "1g.5gb", 19, 0, "gpu-0-mig-1g5gb-19-0"),
        (0, "1g.12gb", 19, 0, "gpu-0-mig-1g12gb-19-0"),
        (3, "1g.10gb", 19, 3, "gpu-3-mig-1g10gb-19-3"),
        (1, "1g.10gb+me", 20, 6, "gpu-1-mig-1g10gb-me-20-6"),
        (0, "2g.12gb+me", 6, 2, "gpu-0-mig-2g12gb-me-6-2"),
        (2, "1g.24gb+me.all", 65, 9, "gpu-2-mig-1g24gb-meall-65-9"),
        (2, "1g.24gb-me", 67, 0, "gpu-2-mig-1g24gb-me-67-0"),
        (2, "1g.24gb+gfx", 47, 3, "gpu-2-mig-1g24gb-gfx-47-3"),
        (7, "7g.80gb", 0, 0, "gpu-7-mig-7g80gb-0-0"),
        (10, "3g.40gb", 9, 4, "gpu-10-mig-3g40gb-9-4"),
    ],
)
def test_mig_device_names(parent: int, profile: str, gi: int, start: int, name: str) -> None:
    assert mig_device_name(parent, profile, gi, start) == name
    assert parse_mig_device_name(name) == (parent, gi, start)


def test_profile_slug_and_non_mig_names() -> None:
    assert mig_profile_slug("1g.10gb+me") == "1g10gb-me"
    assert parse_mig_device_name("gpu-0") is None


def test_devices_come_in_natural_order_whatever_the_inventory_order() -> None:
    gpus = [l4(minor) for minor in (10, 2, 0, 1)]
    gpus = [gpu.model_copy(update={"uuid": f"GPU-{gpu.minor}"}) for gpu in gpus]
    names = [device.name for device in build_devices(node(*gpus))]
    assert names == ["gpu-0", "gpu-1", "gpu-2", "gpu-10"]
    assert [d.to_wire() for d in build_devices(node(*reversed(gpus)))] == [
        d.to_wire() for d in build_devices(node(*gpus))
    ]


def test_mig_devices_of_one_gpu_list_small_profiles_first() -> None:
    big = mig_1g5gb(start=0, uuid="MIG-big").model_copy(
        update={"profile": "3g.20gb", "gi_profile_id": 9, "placement_size": 4}
    )
    small = mig_1g5gb(start=4, uuid="MIG-small")
    me = mig_1g5gb(start=5, uuid="MIG-me", profile="1g.5gb+me", gi=20)
    names = [device.name for device in build_devices(node(a100_mig(big, me, small)))]
    assert names == ["gpu-0-mig-1g5gb-19-4", "gpu-0-mig-1g5gb-me-20-5", "gpu-0-mig-3g20gb-9-0"]
    assert sorted(names, key=device_sort_key) == names


def test_two_devices_with_one_name_are_rejected() -> None:
    with pytest.raises(InvalidInputError, match="gpu-0"):
        build_devices(node(l4(0), l4(0).model_copy(update={"uuid": "GPU-other"})))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("9.0", "9.0.0"),
        ("12", "12.0.0"),
        ("580.95.05", "580.95.5"),
        ("550.54.15", "550.54.15"),
        ("v1.2.3", "1.2.3"),
    ],
)
def test_versions_are_normalised_like_nvidia(text: str, expected: str) -> None:
    assert semver(text) == expected


def test_an_unreadable_version_is_a_clear_error() -> None:
    with pytest.raises(InvalidInputError, match="not a version"):
        semver("five")


def test_mig_devices_inherit_the_parents_addressing_mode_like_nvidia() -> None:
    gpu = a100_mig(mig_1g5gb()).model_copy(update={"addressing_mode": "ATS"})
    (device,) = build_devices(node(gpu))
    assert device.to_wire()["attributes"]["addressingMode"] == s("ATS")
    assert "gpudra.dev/nvlinkCount" not in device.to_wire()["attributes"]
