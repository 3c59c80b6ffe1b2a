"""A GPU model's MIG facts as NVML reports them (:class:`MigProfileInfo`), in the catalog's types.

A node's agent reads each MIG-capable GPU's profiles, placements, sizes and engine counts from NVML and reports
them; the controller's MigLayout validation, the MIG planner and the web view build a :class:`MigModel` from the
report, so a GPU the catalog does not know gets MIG all the same. Pure: no NVML here.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpudra.hardware.gpus.backend import MigProfileInfo
from gpudra.hardware.gpus.catalog import MIB, MigModel, MigProfile, MigSpec


def mig_spec(profiles: Sequence[MigProfileInfo]) -> MigSpec | None:
    """The MIG facts of a GPU with these GPU-instance profiles; None when none can be placed (no MIG).

    The GPU's memory slices are the end of its furthest placement, its compute slices those of its largest
    profile, and its MIG device limit the most instances any profile allows."""
    placed = [p for p in profiles if p.placements and p.placement_size > 0]
    if not placed:
        return None
    return MigSpec(
        memory_slices=max(start + p.placement_size for p in placed for start in p.placements),
        compute_slices=max(p.slice_count for p in placed),
        max_devices=max(p.instance_count for p in placed),
        profiles=tuple(
            MigProfile(
                name=p.profile,
                profile_id=p.gi_profile_id,
                slice_count=p.slice_count,
                placement_size=p.placement_size,
                memory_mib=p.memory_bytes // MIB,
                multiprocessors=p.multiprocessors,
                copy_engines=p.copy_engines,
                decoders=p.decoders,
                encoders=p.encoders,
                jpeg_engines=p.jpeg_engines,
                ofa_engines=p.ofa_engines,
                instance_count=p.instance_count,
                starts=p.placements,
            )
            for p in placed
        ),
    )


def mig_model(model_id: str, memory_bytes: int, profiles: Sequence[MigProfileInfo]) -> MigModel:
    """The model of a GPU that NVML says has ``memory_bytes`` and these GPU-instance profiles."""
    return MigModel(model_id=model_id, memory_mib=memory_bytes // MIB, mig=mig_spec(profiles))
