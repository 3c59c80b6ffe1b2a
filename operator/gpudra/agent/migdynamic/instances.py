"""Dynamic MIG instances of claims on the hardware: create the planned ones, tell whether recorded ones still
exist, destroy them. Blocking (NVML): the kubelet plugin calls these from a worker thread. What to create is
decided by :mod:`gpudra.agent.migdynamic.decisions`; when to record it, by :mod:`gpudra.agent.claimpreparer`."""

from __future__ import annotations

from collections.abc import Sequence

from gpudra.agent.checkpoint import MigInstanceRecord
from gpudra.agent.migdynamic.decisions import InstanceCreation
from gpudra.errors import HardwareError
from gpudra.hardware.gpus.backend import GpuBackend, GpuInstanceInfo, MigProfileInfo
from gpudra.hardware.gpus.inventory import GpuInfo, MigDeviceInfo, NodeInventory
from gpudra.telemetry import get_logger

log = get_logger(__name__)


def is_recorded(record: MigInstanceRecord, instance: MigDeviceInfo | GpuInstanceInfo) -> bool:
    """Whether ``instance`` is the one ``record`` describes: same placement and, once known, same GI id."""
    if (instance.profile, instance.placement_start) != (record.profile, record.placement_start):
        return False
    return record.gpu_instance_id is None or instance.gi_id == record.gpu_instance_id


class MigInstances:
    def __init__(self, backend: GpuBackend) -> None:
        self._backend = backend
        self._profiles: dict[str, tuple[MigProfileInfo, ...]] = {}

    def profiles_of(self, gpu: GpuInfo) -> tuple[MigProfileInfo, ...]:
        """The GPU's MIG profiles with their placements (read once per GPU)."""
        if gpu.uuid not in self._profiles:
            self._profiles[gpu.uuid] = self._backend.mig_profiles(gpu.index)
        return self._profiles[gpu.uuid]

    def create(self, uid: str, creations: Sequence[InstanceCreation]) -> list[MigInstanceRecord]:
        """Create each planned instance (GPU instance at its placement, full compute instance); the records
        with the ids NVML gave them. HardwareError from the first that fails (the earlier ones stay: the
        caller's undo destroys what was recorded)."""
        created = []
        for creation in creations:
            record = creation.record
            info = self._backend.create_mig_device(creation.gpu_index, record.profile, record.placement_start)
            log.info("MIG instance created", uid=uid, gpu=record.parent_uuid, instance=info.uuid,
                     profile=record.profile, placement=record.placement_start)  # fmt: skip
            created.append(
                record.model_copy(
                    update={
                        "gpu_instance_id": info.gi_id,
                        "compute_instance_id": info.ci_id,
                        "uuid": info.uuid,
                    }
                )
            )
        return created

    def destroy(self, uid: str, records: Sequence[MigInstanceRecord], inventory: NodeInventory) -> None:
        """Destroy the recorded instances that still exist, found by GPU and placement (a record written
        before the creation has no ids yet), among the GPU instances: one whose compute instance a killed
        process never created (or had destroyed already) is no MIG device, but still holds its memory slices. A
        GPU gone from the node took its instances with it. ``inventory``: a reading of the GPUs taken after the
        unprepare began (which GPUs exist, under which NVML index). Raises HardwareError when an instance
        cannot be destroyed (the claim's entry stays, a retry repeats this)."""
        gpus = {gpu.uuid: gpu for gpu in inventory.gpus}
        unreadable = [problem for problem in inventory.problems if not problem.published]
        for record in records:
            gpu = gpus.get(record.parent_uuid)
            if gpu is None and unreadable:  # not gone: NVML could not read it (and might not say which it is)
                raise HardwareError(
                    f"cannot destroy the MIG instance {record.profile} at {record.placement_start} of GPU "
                    f"{record.parent_uuid}: NVML cannot read a GPU now ({unreadable[0].message})"
                )
            if gpu is None:
                log.warning("GPU of a MIG instance is gone", uid=uid, gpu=record.parent_uuid)
                continue
            devices = {m.gi_id: m.uuid for m in gpu.mig_devices}
            for instance in self._backend.gpu_instances(gpu.index):
                if is_recorded(record, instance):
                    self._backend.destroy_mig_device(gpu.index, instance.gi_id)
                    log.info("MIG instance destroyed", uid=uid, gpu=gpu.uuid,
                             instance=devices.get(instance.gi_id, "none: no compute instance"),
                             profile=record.profile, placement=record.placement_start)  # fmt: skip

    def destroy_bare(self) -> int:
        """Destroy the GPU instances without a compute instance on every MIG-enabled GPU of the node, and return
        how many. Only a process killed halfway through creating or destroying a MIG device (a claim's, or the
        MigLayout applier's) leaves one: no MIG device shows it, nothing can use it, and it holds memory slices
        that a later create at an overlapping placement needs. Safe only while no MIG change of this agent runs
        (start-up, before the plugin answers and the applier starts). One that cannot be destroyed is logged and
        left for the next start."""
        destroyed = 0
        for gpu in self._backend.read_inventory().gpus:
            if not gpu.mig_enabled:
                continue
            for instance in self._backend.gpu_instances(gpu.index):
                if instance.compute_instances:
                    continue
                try:
                    self._backend.destroy_mig_device(gpu.index, instance.gi_id)
                except HardwareError as exc:
                    log.error("cannot destroy a GPU instance without a compute instance", gpu=gpu.uuid,
                              gpu_instance=instance.gi_id, error=str(exc))  # fmt: skip
                    continue
                destroyed += 1
                log.warning("destroyed a GPU instance without a compute instance (left by a killed process)",
                            gpu=gpu.uuid, gpu_instance=instance.gi_id, profile=instance.profile,
                            placement=instance.placement_start)  # fmt: skip
        return destroyed

    def lost(self, uid: str, records: Sequence[MigInstanceRecord]) -> bool:
        """Whether a recorded instance is gone from its GPU (present): a reboot or GPU reset took it."""
        try:
            gpus = {gpu.uuid: gpu for gpu in self._backend.read_inventory().gpus}
        except HardwareError as exc:
            log.warning("cannot check the MIG instances of a prepared claim", uid=uid, error=str(exc))
            return False
        for record in records:
            gpu = gpus.get(record.parent_uuid)
            if gpu is not None and not any(is_recorded(record, m) for m in gpu.mig_devices):
                log.warning("the MIG instance of a prepared claim is gone (reboot or GPU reset)", uid=uid,
                            gpu=gpu.uuid, profile=record.profile, placement=record.placement_start)  # fmt: skip
                return True
        return False
