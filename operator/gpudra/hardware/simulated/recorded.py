"""A recording of a real node (``gpudra hardware record``) as a simulated machine: the same GPUs at the same bus
ids and NUMA nodes, the same UUIDs, MIG mode and MIG instances (with their UUIDs), fabric state, NVLink count and
driver versions, so the agent publishes from it what it published on the real node.

The GPU model comes from the catalog by PCI device id (the catalog is checked against every recording in
tests/fixtures/nvml/). A recording without a readable inventory cannot be a node.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpudra.errors import ConfigurationError
from gpudra.hardware.catalog import Catalog, load_catalog
from gpudra.hardware.inventory import GpuInfo, NodeInventory
from gpudra.hardware.profiles import FabricReading, GpuSlot
from gpudra.hardware.simulated.machine import GpuSpec, MachineSpec, MigInstanceSpec, derived_gpu_uuid


def read_recording(path: Path) -> dict[str, Any]:
    """The JSON of a recording; ConfigurationError when it cannot be read or is not one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read the recording {path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("inventory"), dict):
        raise ConfigurationError(f"{path} is not a `gpudra hardware record` recording (no inventory)")
    if "error" in data["inventory"]:
        raise ConfigurationError(
            f"{path}: the recorder could not read an inventory: {data['inventory']['error']}"
        )
    return data


def machine_of_recording(
    recording: dict[str, Any], *, node_name: str | None = None, catalog: Catalog | None = None
) -> MachineSpec:
    """The recorded machine. ``node_name`` gives its GPUs (and MIG devices) UUIDs derived from that name instead of
    the recorded ones: for a second simulated node of one recording, since a UUID belongs to one GPU."""
    try:
        inventory = NodeInventory.model_validate(recording["inventory"])
    except ValidationError as exc:
        raise ConfigurationError(f"the recording's inventory is malformed: {exc}") from exc
    models = catalog or load_catalog()
    system = recording.get("system") or {}
    cuda = system.get("cuda_driver_version")
    return MachineSpec(
        gpus=tuple(_gpu(gpu, models, node_name) for gpu in inventory.gpus),
        driver_version=inventory.driver_version,
        cuda_driver_version=cuda if isinstance(cuda, int) else _cuda(inventory.cuda_driver_version),
    )


def _gpu(gpu: GpuInfo, catalog: Catalog, node_name: str | None) -> GpuSpec:
    model = catalog.by_pci_device_id(gpu.pci_device_id)
    if model is None:
        raise ConfigurationError(
            f"the GPU catalog has no model with PCI device id {gpu.pci_device_id:#010x} ({gpu.product_name}); "
            "add it to operator/gpudra/hardware/catalog.yaml"
        )
    fabric = gpu.fabric
    return GpuSpec(
        model_id=model.model_id,
        slot=GpuSlot(gpu.pci_bus_id, gpu.numa_node, gpu.pcie_root),
        uuid=gpu.uuid if node_name is None else derived_gpu_uuid(node_name, gpu.index),
        minor=gpu.minor,
        mig_enabled=gpu.mig_enabled,
        mig_pending=gpu.mig_pending,
        mig_devices=tuple(
            MigInstanceSpec(m.profile, m.placement_start, m.uuid if node_name is None else None)
            for m in gpu.mig_devices
        ),
        fabric=None
        if fabric is None
        else FabricReading(fabric.cluster_uuid, fabric.clique_id, fabric.state, fabric.status),
        addressing_mode=gpu.addressing_mode,
        nvlink_count=gpu.nvlink_count,
    )


def _cuda(text: str) -> int:
    major, _, minor = text.partition(".")
    return 1000 * int(major) + 10 * int(minor or 0)
