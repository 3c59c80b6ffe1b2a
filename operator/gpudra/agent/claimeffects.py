"""ClaimEffects: what a prepared claim changes on the node, done and undone, one kind of change per method.

- sharing settings of full GPUs (EXCLUSIVE_PROCESS compute mode for MPS, a time slice);
- the claim's CDI spec, its device metadata files (KEP-5304) under ``data_dir``, and the directories its spec
  mounts (an MPS claim's, ``<claim_dirs>/<uid>``);
- dynamic MIG instances, created for a claim and destroyed by their recorded placement;
- passthrough GPUs bound to vfio-pci and given back to the nvidia driver (``hardware_changed`` is called after
  each bind or give-back, so that the slices follow at once).

No checkpoint here: :class:`gpudra.agent.claimpreparer.ClaimPreparer` decides when each change happens and
records it first, so a crash at any point leaves a record of every change that may have been made. Each change
that can block (NVML, a durable file, a directory tree) runs in a worker thread to its end even when the prepare is
cancelled meanwhile (:mod:`gpudra.agent.uninterrupted`): the rollback that follows then finds what it undoes. The
CDI spec, a small file replaced without a sync, is written and removed on the event loop, where nothing cuts it
short either: a worker thread's hand-off cost the loop more CPU than the write.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import ParamSpec, TypeVar

from gpudra.agent.cdi import ClaimSpecDir, validate_claim_uid
from gpudra.agent.checkpoint import ClaimEntry, MigInstanceRecord, VfioBindingRecord
from gpudra.agent.devicemetadata import claim_files_dir, write_files
from gpudra.agent.freshinventory import FreshInventory
from gpudra.agent.migdynamic.decisions import InstanceCreation
from gpudra.agent.migdynamic.instances import CreatedInstance, MigInstances
from gpudra.agent.prepareplan import ClaimPlan, sharing_actions
from gpudra.agent.uninterrupted import to_the_end
from gpudra.errors import HardwareError
from gpudra.hardware.gpus.backend import GpuBackend
from gpudra.hardware.gpus.inventory import NodeInventory
from gpudra.telemetry import get_logger

log = get_logger(__name__)
_P = ParamSpec("_P")
_T = TypeVar("_T")


def make_directories(paths: Sequence[str]) -> None:
    """Each directory (and its parents), writable by every user like /tmp: an MPS pipe directory is shared by the
    claim's containers, whatever user each runs as."""
    for path in paths:
        directory = Path(path)
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o1777)


def _write_claim_files(plan: ClaimPlan) -> None:
    write_files(plan.metadata_files)
    make_directories(plan.directories)


def _remove_trees(trees: Sequence[Path]) -> None:
    for tree in trees:
        shutil.rmtree(tree, ignore_errors=True)


async def _change(fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """``fn`` (blocking: NVML, the file system) in a worker thread, awaited to its end."""
    return await to_the_end(asyncio.to_thread(fn, *args, **kwargs))


class ClaimEffects:
    """The hardware and file side of the claims of one driver on this node. ``data_dir``: where device metadata
    files live (removed at undo whenever set); ``claim_dirs``: where each claim's own directories live
    (``<claim_dirs>/<uid>``, removed at undo)."""

    def __init__(
        self,
        backend: GpuBackend,
        specs: ClaimSpecDir,
        *,
        data_dir: Path | None = None,
        claim_dirs: Path | None = None,
        hardware_changed: Callable[[], None] = lambda: None,
    ) -> None:
        self._backend = backend
        self.specs = specs
        self.data_dir = data_dir
        self.claim_dirs = claim_dirs
        self.instances = MigInstances(backend)
        self.inventory = FreshInventory(
            lambda: self._backend.read_inventory(nvlink_peers=False), backend.changes
        )
        """Readings of the GPUs shared by the prepares and unprepares that run at once (without NVLink peers,
        which no plan reads)."""
        self._hardware_changed = hardware_changed

    # -- sharing ---------------------------------------------------------------------------------------------

    async def apply_sharing(self, entry: ClaimEntry) -> None:
        for action in sharing_actions(entry.devices, entry.configs):
            if action.exclusive_process:
                await _change(self._backend.set_compute_mode, action.gpu_uuid, True)
            if action.time_slice is not None:
                await _change(self._backend.set_time_slice, action.gpu_uuid, action.time_slice)

    async def undo_sharing(self, uid: str, entry: ClaimEntry, *, held: Collection[str]) -> None:
        """Back to the defaults, except on GPUs in ``held`` (UUIDs another claim still holds: a shared GPU keeps
        its settings until its last claim goes). A setting that cannot be undone (a lost GPU) is logged, not
        fatal: pods must not stay Terminating."""
        for action in sharing_actions(entry.devices, entry.configs):
            if action.gpu_uuid in held:
                continue
            try:
                if action.exclusive_process:
                    await _change(self._backend.set_compute_mode, action.gpu_uuid, False)
                if action.time_slice is not None:
                    await _change(self._backend.set_time_slice, action.gpu_uuid, 0)
            except HardwareError as exc:
                log.warning("could not undo a sharing setting", uid=uid, gpu=action.gpu_uuid, error=str(exc))

    # -- files -----------------------------------------------------------------------------------------------

    async def write_files(self, uid: str, plan: ClaimPlan) -> Path:
        """The plan's device metadata files and directories (written durably: in a worker thread), then the CDI
        spec that mounts them; the spec's path.

        The spec is written on the event loop: a small file replaced without a sync (the checkpoint is the
        durable record, and the agent's start rewrites a spec a crash or a reboot lost), a few system calls on
        the page cache, where a hand-off to a worker thread cost the loop more CPU than the write itself. Like a
        worker thread's job, it is not cut short by a cancellation."""
        if plan.metadata_files or plan.directories:
            await _change(_write_claim_files, plan)
        return self.specs.write_document(uid, plan.cdi_document)

    async def ensure_spec(self, uid: str, entry: ClaimEntry) -> None:
        """Rewrite a prepared claim's CDI spec when the file is gone."""
        if entry.cdi_document is not None and await asyncio.to_thread(self.specs.read, uid) is None:
            log.warning("CDI spec of a prepared claim was missing; rewritten", uid=uid)
            await _change(self.specs.write_document, uid, entry.cdi_document)

    async def remove_files(self, uid: str, entry: ClaimEntry | None) -> None:
        """The CDI spec (on the event loop, as :meth:`write_files` writes it) and, when ``entry`` says whose they
        are, the device metadata files, then the claim's own directories (in a worker thread, when there are
        any)."""
        self.specs.delete(uid)
        trees = self._trees_of(uid, entry)
        if trees:
            await _change(_remove_trees, trees)

    def _trees_of(self, uid: str, entry: ClaimEntry | None) -> list[Path]:
        """The claim's metadata directory and its own directory, those that exist (a whole GPU's claim has
        neither: a look on the event loop, not a worker thread's job, tells)."""
        trees = [self.claim_dirs / validate_claim_uid(uid)] if self.claim_dirs is not None else []
        if entry is not None and self.data_dir is not None:
            trees.insert(0, claim_files_dir(self.data_dir, entry.namespace, entry.name))
        return [tree for tree in trees if os.path.lexists(tree)]

    # -- dynamic MIG instances -------------------------------------------------------------------------------

    async def create_instances(
        self, uid: str, creations: Sequence[InstanceCreation]
    ) -> list[CreatedInstance]:
        """Create the planned instances; their records with the ids NVML gave them, and their MIG devices."""
        return await to_the_end(self.instances.run(self.instances.create, uid, creations))

    async def destroy_instances(self, uid: str, records: Sequence[MigInstanceRecord]) -> None:
        inventory = await self.inventory.read()
        await to_the_end(self.instances.run(self.instances.destroy, uid, records, inventory))

    async def destroy_bare_instances(self, inventory: NodeInventory | None = None) -> int:
        """See :meth:`MigInstances.destroy_bare`."""
        return await asyncio.to_thread(self.instances.destroy_bare, inventory)

    async def instances_lost(self, uid: str, entry: ClaimEntry) -> bool:
        """Whether a dynamic MIG instance recorded for the claim is gone from its (present) GPU."""
        if not entry.mig_instances_created:
            return False
        return await asyncio.to_thread(self.instances.lost, uid, entry.mig_instances_created)

    # -- passthrough -----------------------------------------------------------------------------------------

    async def bind(self, bindings: Sequence[VfioBindingRecord]) -> None:
        try:
            for binding in bindings:
                await _change(self._backend.bind_vfio, binding.pci_bus_id)
        finally:
            self._hardware_changed()

    async def give_back(self, bindings: Sequence[VfioBindingRecord]) -> None:
        """Back to the nvidia driver; a GPU that cannot go back keeps the claim recorded (the kubelet retries)."""
        try:
            for binding in bindings:
                await _change(self._backend.unbind_vfio, binding.pci_bus_id)
        finally:
            self._hardware_changed()

    # -- start-up --------------------------------------------------------------------------------------------

    async def restore(self, uid: str, entry: ClaimEntry) -> bool:
        """Re-apply a completed claim's sharing and vfio binding, and rewrite its CDI spec when it is missing or
        differs (a reboot wipes /var/run/cdi). True when the spec was rewritten."""
        try:
            await self.apply_sharing(entry)
            if entry.vfio_bindings:
                await self.bind(entry.vfio_bindings)
        except HardwareError as exc:
            log.error(
                "could not re-apply sharing or vfio binding of a prepared claim", uid=uid, error=str(exc)
            )
        if entry.cdi_document is None:
            log.warning("prepared claim has no CDI document in the checkpoint; cannot regenerate", uid=uid)
            return False
        if await asyncio.to_thread(self.specs.read, uid) == entry.cdi_document:
            return False
        await _change(self.specs.write_document, uid, entry.cdi_document)
        return True
