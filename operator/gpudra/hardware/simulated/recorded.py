"""A recording of a real node (``gpudra hardware record``) as a simulated machine: the same GPUs at the same bus
ids and NUMA nodes, the same UUIDs, MIG mode and MIG instances (with their UUIDs), fabric state, NVLink count and
driver versions, so the agent publishes from it what it published on the real node.

The GPU model comes from the catalog by PCI device id (the catalog is checked against every recording in
tests/fixtures/nvml/); a model the catalog lacks is built from the recorded NVML answers (device facts, GPU-instance
profiles and placements; each profile gets only its full compute instance). A recording without a readable
inventory cannot be a node.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpudra.errors import ConfigurationError
from gpudra.hardware.gpus.catalog import (
    MIB,
    PROFILE_SUFFIX_BY_CONSTANT,
    Catalog,
    GpuModel,
    load_catalog,
    mig_profile_name,
    parse_catalog,
)
from gpudra.hardware.gpus.inventory import GpuInfo, NodeInventory
from gpudra.hardware.simulated.machine import GpuSpec, MachineSpec, MigInstanceSpec, derived_gpu_uuid
from gpudra.hardware.simulated.profiles import FabricReading, GpuSlot


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
    raw = {g.get("index"): g for g in recording.get("gpus") or [] if isinstance(g, dict)}
    known: dict[str, GpuModel] = {}
    gpus = []
    for gpu in inventory.gpus:
        model = models.by_pci_device_id(gpu.pci_device_id)
        if model is None:
            model = _recorded_model(gpu, raw.get(gpu.index))
            known[model.model_id] = model
        gpus.append(_gpu(gpu, model, node_name))
    return MachineSpec(
        gpus=tuple(gpus),
        driver_version=inventory.driver_version,
        cuda_driver_version=cuda if isinstance(cuda, int) else _cuda(inventory.cuda_driver_version),
        models=tuple(known.values()),
    )


def _recorded_model(gpu: GpuInfo, raw: dict[str, Any] | None) -> GpuModel:
    """A model the catalog lacks, as the recording's NVML answers describe it."""
    where = f"GPU {gpu.index} ({gpu.product_name}, PCI device id {gpu.pci_device_id:#010x})"
    if raw is None or gpu.product_name is None or gpu.memory_bytes is None:
        raise ConfigurationError(f"the GPU catalog lacks {where} and the recording does not describe it")
    try:
        total_mib = gpu.memory_bytes // MIB
        profiles = [
            _recorded_profile(p, total_mib) for p in raw["gpu_instance_profiles"] if p.get("placements")
        ]
        mig = None
        if gpu.mig_capable and profiles:
            mig = {
                "memory_slices": max(start + p["placement_size"] for p in profiles for start in p["starts"]),
                "compute_slices": max(p["slice_count"] for p in profiles),
                "max_devices": max(p["instance_count"] for p in profiles),
                "profiles": profiles,
            }
        links = raw.get("nvlink_link_count") or {}
        model = {
            "product_name": gpu.product_name,
            "memory_mib": total_mib,
            "multiprocessors": max((p["multiprocessors"] for p in profiles), default=gpu.multiprocessors),
            "compute_capability": gpu.cuda_compute_capability or "",
            "architecture": raw["architecture"]["name"],
            "architecture_constant": raw["architecture"]["value"],
            "pci_device_id": gpu.pci_device_id,
            "brand": raw["brand"]["name"],
            "brand_constant": raw["brand"]["value"],
            "nvlink_count": links.get("value") or 0,
            "note": "from a recording; not in the catalog",
            "mig": mig,
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigurationError(f"the recording of {where} is incomplete: {exc}") from exc
    return parse_catalog({"models": {gpu.product_name: model}}).models[gpu.product_name]


def _recorded_profile(raw: dict[str, Any], total_mib: int) -> dict[str, Any]:
    info, constant = raw["info"], int(raw["constant"])
    suffix = PROFILE_SUFFIX_BY_CONSTANT.get(constant, "")
    return {
        "name": mig_profile_name(info["sliceCount"], info["memorySizeMB"], total_mib, suffix),
        "constant": constant,
        "profile_id": info["id"],
        "slice_count": info["sliceCount"],
        "placement_size": raw["placements"][0]["size"],
        "memory_mib": info["memorySizeMB"],
        "multiprocessors": info["multiprocessorCount"],
        "copy_engines": info["copyEngineCount"],
        "decoders": info["decoderCount"],
        "encoders": info["encoderCount"],
        "jpeg_engines": info["jpegCount"],
        "ofa_engines": info["ofaCount"],
        "instance_count": info["instanceCount"],
        "starts": [p["start"] for p in raw["placements"]],
    }


def _gpu(gpu: GpuInfo, model: GpuModel, node_name: str | None) -> GpuSpec:
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
