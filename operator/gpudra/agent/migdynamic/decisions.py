"""Pure decisions of dynamic MIG at prepare: which MIG instances a claim's allocation asks to create.

On a GPU in dynamic mode the published MIG devices are placements, not instances: an allocation result naming
``gpu-<minor>-mig-<profile>-<giProfileId>-<start>`` means "create that GPU instance at that start, with its
full compute instance". The full GPU ``gpu-<minor>`` of a dynamic GPU is prepared as a normal GPU; MIG mode
stays on. No I/O here: :mod:`gpudra.agent.claimpreparer` records the instances, :mod:`gpudra.agent.claimeffects`
creates and destroys them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from gpudra.agent.checkpoint import MigInstanceRecord
from gpudra.api.dra import DeviceRequestAllocationResult
from gpudra.devices import gpu_device_name, parse_mig_device_name
from gpudra.errors import PrepareError
from gpudra.hardware.gpus.backend import MigProfileInfo
from gpudra.hardware.gpus.inventory import GpuInfo, NodeInventory

ProfilesOf = Callable[[GpuInfo], Sequence[MigProfileInfo]]


@dataclass(frozen=True, slots=True)
class InstanceCreation:
    """One MIG instance to create for a claim: on which GPU (NVML index) and the record kept of it."""

    gpu_index: int
    record: MigInstanceRecord


def _overlaps(start: int, size: int, other_start: int, other_size: int) -> bool:
    return start < other_start + other_size and other_start < start + size


def plan_instances(
    results: Sequence[DeviceRequestAllocationResult],
    inventory: NodeInventory,
    dynamic: Collection[str],
    profiles_of: ProfilesOf,
) -> list[InstanceCreation]:
    """The instances to create for ``results`` on the GPUs whose UUIDs are in ``dynamic``, in result order.

    A result naming an instance that exists already (one the GPU had before it went dynamic, published as a
    static MIG device) needs no creation. PrepareError when a result names a profile the GPU does not have or a
    placement it does not offer, when another instance covers part of the placement (reason
    PlacementOccupied), or when the full GPU is asked for while MIG instances exist on it (GpuPartitioned).
    """
    by_minor = {gpu.minor: gpu for gpu in inventory.gpus if gpu.uuid in dynamic}
    creations: list[InstanceCreation] = []
    for result in results:
        parsed = parse_mig_device_name(result.device)
        if parsed is None:
            _check_full_gpu(result.device, by_minor.values())
            continue
        minor, gi_profile_id, start = parsed
        gpu = by_minor.get(minor)
        if gpu is None:
            continue  # a static MIG device: it exists already
        profile = next((p for p in profiles_of(gpu) if p.gi_profile_id == gi_profile_id), None)
        if profile is None or start not in profile.placements:
            raise PrepareError(
                f"device {result.device}: GPU {gpu.uuid} offers no MIG profile id {gi_profile_id} at placement "
                f"{start}",
                reason="UnknownDevice",
            )
        if any((m.profile, m.placement_start) == (profile.profile, start) for m in gpu.mig_devices):
            continue  # an instance that exists (published as a static MIG device): used as it is
        for instance in gpu.mig_devices:
            if _overlaps(start, profile.placement_size, instance.placement_start, instance.placement_size):
                raise PrepareError(
                    f"device {result.device}: memory slices [{start}, {start + profile.placement_size}) of GPU "
                    f"{gpu.uuid} are taken by MIG instance {instance.profile}@{instance.placement_start} "
                    f"({instance.uuid})",
                    reason="PlacementOccupied",
                )
        creations.append(
            InstanceCreation(
                gpu.index,
                MigInstanceRecord(parent_uuid=gpu.uuid, profile=profile.profile, placement_start=start),
            )
        )
    return creations


def _check_full_gpu(device: str, gpus: Collection[GpuInfo]) -> None:
    for gpu in gpus:
        if device == gpu_device_name(gpu.minor) and gpu.mig_devices:
            held = ", ".join(f"{m.profile}@{m.placement_start}" for m in gpu.mig_devices)
            raise PrepareError(
                f"device {device}: GPU {gpu.uuid} is in dynamic MIG mode and has MIG instances ({held}); the "
                "whole GPU is free only when none exist",
                reason="GpuPartitioned",
            )


def claimed_placements(records: Sequence[MigInstanceRecord]) -> dict[str, list[tuple[str, int]]]:
    """GPU UUID -> (profile, placement start) of the given instance records (what the publisher keeps
    offering while a claim holds them)."""
    out: dict[str, list[tuple[str, int]]] = {}
    for record in records:
        out.setdefault(record.parent_uuid, []).append((record.profile, record.placement_start))
    return out
