"""gpudra.dev/nvlinkPeers: which devices carry it, with what value, and when it is left out."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.api.dra import Device, DeviceAttribute
from gpudra.devices.build import build_devices
from gpudra.devices.nvlinkpeers import NVLINK_PEERS, value_count, with_nvlink_peers
from gpudra.hardware.gpus.inventory import GpuInfo, MigDeviceInfo, NodeInventory

MiB = 2**20


def gpu(index: int, *, peers: tuple[int, ...] = (), mig: bool = False) -> GpuInfo:
    fields: dict[str, Any] = {
        "index": index,
        "minor": index,
        "uuid": f"GPU-{index}",
        "product_name": "NVIDIA H100 80GB HBM3",
        "brand": "Nvidia",
        "architecture": "Hopper",
        "cuda_compute_capability": "9.0",
        "pci_bus_id": f"0000:{index + 1:02x}:00.0",
        "pci_device_id": 0x233010DE,
        "memory_bytes": 81559 * MiB,
        "multiprocessors": 132,
        "mig_capable": True,
        "mig_enabled": mig,
        "mig_pending": mig,
        "nvlink_count": 18 if peers else 0,
        "nvlink_peers": tuple(f"GPU-{p}" for p in peers),
    }
    if mig:
        fields["mig_devices"] = (
            MigDeviceInfo(
                uuid=f"MIG-{index}",
                parent_uuid=f"GPU-{index}",
                parent_index=index,
                parent_minor=index,
                profile="7g.80gb",
                gi_profile_id=0,
                ci_profile_id=0,
                gi_id=0,
                ci_id=0,
                placement_start=0,
                placement_size=8,
                memory_bytes=80 * 1024 * MiB,
                multiprocessors=132,
                copy_engines=8,
                decoders=7,
                encoders=0,
                jpeg_engines=7,
                ofa_engines=1,
            ),
        )
    return GpuInfo(**fields)


def node(*gpus: GpuInfo) -> NodeInventory:
    return NodeInventory(node_name="n", driver_version="580.95.05", cuda_driver_version="13.0", gpus=gpus)


def peers_by_device(inventory: NodeInventory) -> dict[str, list[str] | None]:
    published = with_nvlink_peers(build_devices(inventory), inventory)
    return {
        d.name: (d.attributes or {})[NVLINK_PEERS].strings if NVLINK_PEERS in (d.attributes or {}) else None
        for d in published
    }


@pytest.mark.parametrize(
    ("inventory", "expected"),
    [
        pytest.param(
            node(gpu(0, peers=(1, 2)), gpu(1, peers=(0, 2)), gpu(2, peers=(0, 1))),
            {
                "gpu-0": ["GPU-0", "GPU-1", "GPU-2"],
                "gpu-1": ["GPU-0", "GPU-1", "GPU-2"],
                "gpu-2": ["GPU-0", "GPU-1", "GPU-2"],
            },
            id="nvswitch: every GPU lists the whole island, itself included",
        ),
        pytest.param(
            node(gpu(0, peers=(1,)), gpu(1, peers=(0,)), gpu(2, peers=(3,)), gpu(3, peers=(2,))),
            {
                "gpu-0": ["GPU-0", "GPU-1"],
                "gpu-1": ["GPU-0", "GPU-1"],
                "gpu-2": ["GPU-2", "GPU-3"],
                "gpu-3": ["GPU-2", "GPU-3"],
            },
            id="bridged pairs: each GPU lists itself and its partner",
        ),
        pytest.param(
            node(gpu(0), gpu(1)), {"gpu-0": ["GPU-0"], "gpu-1": ["GPU-1"]}, id="no NVLink: a list of one"
        ),
        pytest.param(
            node(gpu(0, peers=(1,)), gpu(1, peers=(0,), mig=True)),
            {"gpu-0": ["GPU-0", "GPU-1"], "gpu-1-mig-7g80gb-0-0": None},
            id="a MIG device carries none (MIG has no peer-to-peer)",
        ),
    ],
)
def test_nvlink_peers_by_device(inventory: NodeInventory, expected: dict[str, list[str] | None]) -> None:
    assert peers_by_device(inventory) == expected


def test_a_device_that_would_pass_48_values_is_published_without_the_list() -> None:
    inventory = node(gpu(0, peers=(1,)), gpu(1, peers=(0,)))
    devices = build_devices(inventory)
    # 46 values: the list of two still fits on gpu-0; one more value and it would not
    filler = {f"x{i}": DeviceAttribute(int=i) for i in range(46 - value_count(devices[0]))}
    full = devices[0].model_copy(update={"attributes": {**(devices[0].attributes or {}), **filler}})
    fits = with_nvlink_peers([full, devices[1]], inventory)[0]
    assert value_count(fits) == 48 and NVLINK_PEERS in (fits.attributes or {})
    one_more = {**(full.attributes or {}), "extra": DeviceAttribute(int=0)}
    too_many = with_nvlink_peers([full.model_copy(update={"attributes": one_more})], inventory)[0]
    assert NVLINK_PEERS not in (too_many.attributes or {})
    assert too_many.attributes == one_more


def test_list_items_count_one_value_each() -> None:
    device = Device(
        name="d",
        attributes={"a": DeviceAttribute(string="x"), "b": DeviceAttribute(strings=["p", "q", "r"])},
    )
    assert value_count(device) == 4
