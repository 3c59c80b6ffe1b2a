"""Dynamic MIG instances of claims on the hardware: create the planned ones, tell whether recorded ones still
exist, destroy them. Blocking (NVML): the kubelet plugin runs creations and destructions on their own thread
(:meth:`MigInstances.run`), the rest in a worker thread. What to create is
decided by :mod:`gpudra.agent.migdynamic.decisions`; when to record it, by :mod:`gpudra.agent.claimpreparer`."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

from gpudra.agent.checkpoint import MigInstanceRecord
from gpudra.agent.migdynamic.decisions import InstanceCreation
from gpudra.errors import HardwareError, HardwareInvalidArgument, HardwareNotFound
from gpudra.hardware.gpus.backend import GpuBackend, GpuInstanceInfo, MigProfileInfo
from gpudra.hardware.gpus.inventory import GpuInfo, MigDeviceInfo, NodeInventory
from gpudra.telemetry import get_logger

log = get_logger(__name__)
_P = ParamSpec("_P")
_T = TypeVar("_T")


def is_recorded(record: MigInstanceRecord, instance: MigDeviceInfo | GpuInstanceInfo) -> bool:
    """Whether ``instance`` is the one ``record`` describes: same placement and, once known, same GI id."""
    if (instance.profile, instance.placement_start) != (record.profile, record.placement_start):
        return False
    return record.gpu_instance_id is None or instance.gi_id == record.gpu_instance_id


@dataclass(frozen=True, slots=True)
class CreatedInstance:
    """An instance created for a claim: its record, with NVML's ids, and its MIG device as NVML reported it."""

    record: MigInstanceRecord
    device: MigDeviceInfo


def with_instances(inventory: NodeInventory, devices: Sequence[MigDeviceInfo]) -> NodeInventory:
    """``inventory`` with ``devices`` (just created, as NVML reported them) among their GPUs' MIG devices, in
    the order a reading has them (by placement): what reading the GPUs again would show of them, the rest as
    ``inventory`` had it (a claim's plan looks up its own devices). With 56 claims prepared at once, each
    waiting for a reading that began after its creation kept a reading of the node (5 ms of NVML calls on a
    dgx-h100) running for as long as the creations lasted."""
    added: dict[str, list[MigDeviceInfo]] = {}
    for device in devices:
        added.setdefault(device.parent_uuid, []).append(device)
    if not added:
        return inventory
    gpus = []
    for gpu in inventory.gpus:
        new = added.get(gpu.uuid)
        if new:
            ids = {m.gi_id for m in new}
            kept = [m for m in gpu.mig_devices if m.gi_id not in ids]
            ordered = sorted([*kept, *new], key=lambda m: (m.placement_start, m.gi_id, m.ci_id))
            gpu = gpu.model_copy(update={"mig_devices": tuple(ordered)})
        gpus.append(gpu)
    return inventory.model_copy(update={"gpus": tuple(gpus)})


class MigInstances:
    def __init__(self, backend: GpuBackend) -> None:
        self._backend = backend
        self._profiles: dict[str, tuple[MigProfileInfo, ...]] = {}
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mig-change")

    async def run(self, change: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """``change`` (:meth:`create`, :meth:`destroy`) on the MIG changes' own thread, one after another, not
        in the event loop's default pool: 56 claims prepared at once held every default thread with a creation
        waiting for NVML, and their checkpoint and CDI writes (which the file system would have done meanwhile)
        queued behind them. The thread takes the next change as soon as it is done with one. One thread: the
        simulated NVML runs one call at a time, and eight threads contending for it made a burst slower."""
        call = functools.partial(contextvars.copy_context().run, change, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._thread, call)

    def profiles_of(self, gpu: GpuInfo) -> tuple[MigProfileInfo, ...]:
        """The GPU's MIG profiles with their placements (read once per GPU)."""
        if gpu.uuid not in self._profiles:
            self._profiles[gpu.uuid] = self._backend.mig_profiles(gpu.index)
        return self._profiles[gpu.uuid]

    def create(self, uid: str, creations: Sequence[InstanceCreation]) -> list[CreatedInstance]:
        """Create each planned instance (GPU instance at its placement, full compute instance); the records
        with the ids NVML gave them, and the MIG devices as NVML reports them. HardwareError from the first
        that fails (the earlier ones stay: the caller's undo destroys what was recorded)."""
        created = []
        for creation in creations:
            record = creation.record
            info = self._backend.create_mig_device(creation.gpu_index, record.profile, record.placement_start)
            log.info("MIG instance created", uid=uid, gpu=record.parent_uuid, instance=info.uuid,
                     profile=record.profile, placement=record.placement_start)  # fmt: skip
            ids = {"gpu_instance_id": info.gi_id, "compute_instance_id": info.ci_id, "uuid": info.uuid}
            created.append(CreatedInstance(record.model_copy(update=ids), info))
        return created

    def destroy(self, uid: str, records: Sequence[MigInstanceRecord], inventory: NodeInventory) -> None:
        """Destroy the recorded instances that still exist, found by GPU and placement (a record written
        before the creation has no ids yet), among the GPU instances: one whose compute instance a killed
        process never created (or had destroyed already) is no MIG device, but still holds its memory slices. A
        GPU gone from the node took its instances with it. ``inventory``: a reading of the GPUs taken after the
        unprepare began (which GPUs exist, under which NVML index, and their MIG devices: one it shows is
        destroyed by its GPU instance id without listing the GPU's instances again; the list is read only for a
        record the reading does not show). Raises HardwareError when an instance cannot be destroyed (the
        claim's entry stays, a retry repeats this)."""
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
            read = next((m for m in gpu.mig_devices if is_recorded(record, m)), None)
            if read is not None and self._destroyed(gpu.index, read.gi_id):
                log.info("MIG instance destroyed", uid=uid, gpu=gpu.uuid, instance=read.uuid,
                         profile=record.profile, placement=record.placement_start)  # fmt: skip
                continue
            # not among the MIG devices read: a GPU instance without a compute instance, if anything
            for instance in self._backend.gpu_instances(gpu.index):
                if is_recorded(record, instance):
                    self._backend.destroy_mig_device(gpu.index, instance.gi_id)
                    log.info("MIG instance destroyed", uid=uid, gpu=gpu.uuid, instance="none: no compute instance",
                             profile=record.profile, placement=record.placement_start)  # fmt: skip

    def _destroyed(self, gpu_index: int, gi_id: int) -> bool:
        """Destroy the GPU instance a reading showed; False when NVML no longer knows it by that id."""
        try:
            self._backend.destroy_mig_device(gpu_index, gi_id)
        except (HardwareNotFound, HardwareInvalidArgument):
            return False
        return True

    def destroy_bare(self, inventory: NodeInventory | None = None) -> int:
        """Destroy the GPU instances without a compute instance on every MIG-enabled GPU of the node, and return
        how many. Only a process killed halfway through creating or destroying a MIG device (a claim's, or the
        MigLayout applier's) leaves one: no MIG device shows it, nothing can use it, and it holds memory slices
        that a later create at an overlapping placement needs. Safe only while no MIG change of this agent runs
        (start-up, before the plugin answers and the applier starts). One that cannot be destroyed is logged and
        left for the next start. ``inventory``: a current reading of the node (NVML indices), else one is taken."""
        destroyed = 0
        if inventory is None:
            inventory = self._backend.read_inventory(nvlink_peers=False)
        for gpu in inventory.gpus:
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
            gpus = {gpu.uuid: gpu for gpu in self._backend.read_inventory(nvlink_peers=False).gpus}
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
