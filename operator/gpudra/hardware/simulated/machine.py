"""What one simulated machine holds, GPU by GPU: the description :meth:`FakeNvml.from_machine` builds a node from.

A node profile gives one (every GPU alike, UUIDs derived from the node name); so do a ``gpudra hardware record``
of a real node (the recorded UUIDs, bus ids, MIG instances and versions) and a copy of a real cluster's slices
(``gpudra up --from-cluster``). Pure data: no NVML here.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from gpudra.hardware.gpus.catalog import GpuModel
from gpudra.hardware.simulated.profiles import SIMULATION_NAMESPACE, FabricReading, GpuSlot, NodeProfile


@dataclass(frozen=True)
class MigInstanceSpec:
    """A MIG device that exists when the machine starts: a GPU-instance profile at a placement start, with its
    full compute instance. ``uuid`` keeps a recorded MIG UUID; None derives one."""

    profile: str  # "1g.10gb"
    start: int
    uuid: str | None = None


@dataclass(frozen=True)
class GpuSpec:
    model_id: str  # key of the GPU catalog
    slot: GpuSlot
    uuid: str
    minor: int | None = None  # None: the GPU's index
    mig_enabled: bool = False
    mig_pending: bool | None = None  # None: as mig_enabled
    mig_devices: tuple[MigInstanceSpec, ...] = ()
    fabric: FabricReading | None = None
    addressing_mode: str | None = None
    nvlink_count: int | None = None  # None: the catalog model's


@dataclass(frozen=True)
class MachineSpec:
    gpus: tuple[GpuSpec, ...]
    nvlink_islands: tuple[tuple[int, ...], ...] = ()  # GPUs (by index) that reach each other over NVLink
    driver_version: str = "580.95.05"
    cuda_driver_version: int = 13000  # 1000 * major + 10 * minor
    models: tuple[GpuModel, ...] = ()  # models the catalog lacks that the machine brings (from a recording)


def derived_gpu_uuid(node_name: str, index: int) -> str:
    """The UUID a simulated node's GPU gets from its node name and index (the same on every run)."""
    return f"GPU-{uuid.uuid5(SIMULATION_NAMESPACE, f'{node_name}/gpu/{index}')}"


def machine_of_profile(profile: NodeProfile, node_name: str, fleet_index: int = 0) -> MachineSpec:
    """A node of the profile: UUIDs from ``node_name``, the NVLink clique from ``fleet_index``."""
    fabric = profile.fabric_reading(fleet_index)
    layout = tuple(MigInstanceSpec(name, start) for name, start in profile.mig_layout)
    return MachineSpec(
        gpus=tuple(
            GpuSpec(
                model_id=profile.model_id,
                slot=slot,
                uuid=derived_gpu_uuid(node_name, index),
                mig_enabled=profile.mig_enabled,
                mig_devices=layout if profile.mig_enabled else (),
                fabric=fabric,
                addressing_mode=profile.addressing_mode,
            )
            for index, slot in enumerate(profile.slots)
        ),
        nvlink_islands=profile.nvlink_islands(),
        driver_version=profile.driver_version,
        cuda_driver_version=profile.cuda_driver_version,
    )
