"""ClaimPreparer: the node agent's answer to the kubelet's NodePrepareResources / NodeUnprepareResources.

Prepare of one claim, under that claim's checkpoint lock (other claims run in parallel, there is no global lock):
GET the ResourceClaim, check its UID and allocation, take the results of this driver on this node, map them to
the GPUs and MIG devices present now, resolve the opaque configs, refuse devices another claim holds, then

    [dynamic MIG: checkpoint PrepareStarted (placements to create) -> instances created -> checkpoint (their
    ids)] -> checkpoint PrepareStarted (with the plan) -> sharing settings -> CDI spec written -> PrepareCompleted

and report ``status.devices`` Ready on the claim (:mod:`gpudra.agent.claimstatus`). A failure after
PrepareStarted is rolled back at once; a crash is repaired at the next start (:mod:`gpudra.agent.recovery`). A
second prepare of a completed claim answers from the checkpoint. Unprepare undoes exactly what the checkpoint says
was done, and an unknown claim is a success.

The GPU driver's plan (which GPUs and MIG devices, sharing settings, CDI edits) is the default; another
driver served by the same machinery (the compute-domain driver) passes its own ``planner``, which decides the
plan of a claim and is told when a claim was released.

Passthrough (``passthrough``): a ``gpu-vfio-<i>`` device's GPU is recorded (checkpoint PrepareStarted with
``vfio_bindings``) and then bound to vfio-pci, after the plan (and its CDI spec, with /dev/vfio/<group>) is
decided and before the plan is recorded; undo, unprepare and start-up recovery give the recorded GPUs back to the
nvidia driver after the CDI spec is gone, and start-up binds a completed claim's GPU again (a reboot gave it back).
``hardware_changed`` is called after every bind or give-back, so that the slices follow at once.

Dynamic MIG instances are recorded before they are created, so a crash at any point leaves a record of every
instance that may exist; undo (and start-up recovery) destroys them by placement. Unprepare destroys them after
the CDI spec is gone.

``hook`` is called with the name of each step boundary (``instances_planned``, ``instances_created``,
``instances_recorded``, ``prepare_started``, ``cdi_written``, ``before_prepare_completed``, ``prepare_completed``,
``unprepare_started``, ``cdi_deleted``, ``instances_destroyed``, ``vfio_planned``, ``vfio_bound``,
``vfio_released``); tests raise from it to simulate a crash there.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from gpudra.agent.cdi import ClaimSpecDir
from gpudra.agent.checkpoint import CheckpointStore, ClaimEntry, VfioBindingRecord
from gpudra.agent.claimstatus import ClaimStatus
from gpudra.agent.devicemetadata import remove_claim_files, with_device_metadata, write_files
from gpudra.agent.health import DeviceProblem
from gpudra.agent.kubeletplugin.messages import ClaimRef, PrepareResult, UnprepareResult
from gpudra.agent.migdynamic.decisions import InstanceCreation, plan_instances
from gpudra.agent.migdynamic.instances import MigInstances
from gpudra.agent.prepareplan import (
    ClaimPlan,
    DeviceKey,
    conflicts,
    device_targets,
    plan_claim,
    prepared_devices,
    select_results,
    sharing_actions,
)
from gpudra.api.dra import DeviceRequestAllocationResult, ResourceClaim
from gpudra.api.nvidia import SharingFeatures
from gpudra.errors import (
    CheckpointError,
    GpudraError,
    HardwareError,
    KubeError,
    NotFoundError,
    PrepareError,
)
from gpudra.hardware.backend import GpuBackend
from gpudra.hardware.inventory import NodeInventory
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.resources import RESOURCE_CLAIMS
from gpudra.metrics import Metrics
from gpudra.telemetry import get_logger

log = get_logger(__name__)
Hook = Callable[[str], None]


def no_hook(step: str) -> None:
    return None


class ClaimPlanner(Protocol):
    """What a driver other than the GPU driver plugs into :class:`ClaimPreparer`."""

    async def plan(
        self, ref: ClaimRef, claim: ResourceClaim, results: Sequence[DeviceRequestAllocationResult]
    ) -> ClaimPlan:
        """Everything prepare will do for the claim; raise a GpudraError when it cannot be prepared (yet)."""
        ...

    async def released(self, uid: str, entry: ClaimEntry | None) -> None:
        """After an unprepare (``entry`` None: the claim was not prepared here, perhaps only attempted)."""
        ...


def _as_prepare_error(exc: GpudraError) -> PrepareError:
    if isinstance(exc, PrepareError):
        return exc
    if isinstance(exc, HardwareError):
        return PrepareError(f"GPU operation failed: {exc}", reason="Hardware")
    if isinstance(exc, CheckpointError):
        return PrepareError(f"checkpoint: {exc}", reason="Checkpoint")
    if isinstance(exc, KubeError):
        return PrepareError(f"Kubernetes API: {exc}", reason="ApiError")
    return PrepareError(str(exc), reason="PrepareFailed")


class ClaimPreparer:
    """PluginHandler of the GPU driver. ``shareable`` names devices that allow multiple allocations;
    ``problems`` (when the agent watches GPU health) says which devices are unhealthy now and why."""

    def __init__(
        self,
        *,
        client: KubeClient,
        backend: GpuBackend,
        store: CheckpointStore,
        specs: ClaimSpecDir,
        driver: str,
        node: str,
        metrics: Metrics | None = None,
        events: EventRecorder | None = None,
        features: SharingFeatures | None = None,
        shareable: Callable[[], Iterable[str]] = lambda: (),
        problems: Callable[[], Mapping[str, DeviceProblem]] | None = None,
        dynamic_gpus: Callable[[], Collection[str]] = frozenset,
        mps_root: str = "/var/lib/kubelet/plugins/gpu.nvidia.com/mps",
        hook: Hook = no_hook,
        planner: ClaimPlanner | None = None,
        passthrough: bool = False,
        hardware_changed: Callable[[], None] = lambda: None,
        data_dir: Path | None = None,
        device_metadata: bool = False,
    ) -> None:
        self._client = client
        self._backend = backend
        self.store = store
        self.specs = specs
        self.driver = driver
        self.node = node
        self._metrics = metrics
        self.status = ClaimStatus(
            client,
            events or EventRecorder(client, f"gpudra-agent-{node}", window_seconds=60),
            driver=driver,
            node=node,
            problems=problems,
        )
        self._features = features
        self._shareable = shareable
        self._dynamic_gpus = dynamic_gpus
        self._instances = MigInstances(backend)
        self._mps_root = mps_root
        self.hook = hook
        self._planner = planner
        self._passthrough = passthrough
        self._hardware_changed = hardware_changed
        self._data_dir = data_dir  # device metadata files live here; removed at unprepare whenever set
        self._device_metadata = device_metadata and data_dir is not None
        self._in_flight: dict[str, set[DeviceKey]] = {}
        self._repartitions = 0  # bumped when the MIG applier releases devices it changed

    # -- PluginHandler ---------------------------------------------------------------------------------------

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        results = await asyncio.gather(*(self._prepare_one(ref) for ref in claims))
        self._update_gauge()
        return {ref.uid: result for ref, result in zip(claims, results, strict=True)}

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, UnprepareResult]:
        results = await asyncio.gather(*(self._unprepare_one(ref) for ref in claims))
        self._update_gauge()
        return {ref.uid: result for ref, result in zip(claims, results, strict=True)}

    # -- prepare ---------------------------------------------------------------------------------------------

    async def _prepare_one(self, ref: ClaimRef) -> PrepareResult:
        started = time.monotonic()
        try:
            async with self.store.claim_lock(ref.uid):
                result = await self._prepare_locked(ref)
        except PrepareError as exc:
            log.warning("prepare failed", claim=f"{ref.namespace}/{ref.name}", uid=ref.uid, error=str(exc))
            self._count("prepare", "failed", exc.reason)
            return PrepareResult(error=str(exc))
        finally:
            if self._metrics is not None:
                self._metrics.prepare_seconds.labels(self.node).observe(time.monotonic() - started)
        self._count("prepare", "ok")
        return result

    async def _prepare_locked(self, ref: ClaimRef) -> PrepareResult:
        entry = self.store.get(ref.uid)
        if entry is not None and entry.state == "PrepareCompleted":
            await self._ensure_spec(ref.uid, entry)
            return PrepareResult(devices=prepared_devices(entry.devices))
        claim: dict[str, Any] | None = None
        results: list[DeviceRequestAllocationResult] = []
        try:
            claim = await self._get_claim(ref)
            model = ResourceClaim.from_wire(claim)
            results = select_results(model, ref, driver=self.driver, node=self.node)
            planner = self._planner
            plan = await self._execute(
                ref,
                results,
                (lambda: planner.plan(ref, model, results))
                if planner is not None
                else (lambda: self._plan_gpus(ref, model, results)),
            )
        except GpudraError as exc:
            error = _as_prepare_error(exc)
            await self.status.failed(ref, claim, results, error)
            if error is exc:
                raise
            raise error from exc
        await self.status.prepared(ref, plan.devices)
        return PrepareResult(devices=prepared_devices(plan.devices))

    async def _plan_gpus(
        self, ref: ClaimRef, model: ResourceClaim, results: Sequence[DeviceRequestAllocationResult]
    ) -> ClaimPlan:
        """The GPU driver's plan; dynamic MIG instances the results name are recorded and created first."""
        dynamic = frozenset(self._dynamic_gpus())
        inventory = await asyncio.to_thread(self._backend.read_inventory)
        creations = await asyncio.to_thread(
            plan_instances, results, inventory, dynamic, self._instances.profiles_of
        )
        if creations:
            await self.store.transition(
                ref.uid, "PrepareStarted", namespace=ref.namespace, name=ref.name,
                mig_instances_created=[c.record for c in creations],
            )  # fmt: skip
            self.hook("instances_planned")
            inventory = await self._create_instances(ref.uid, creations)
        pci = await asyncio.to_thread(self._backend.pci_gpus) if self._passthrough else ()
        targets = device_targets(inventory, dynamic, pci)
        plan = plan_claim(
            ref.uid, model, results, targets, driver=self.driver, features=self._features,
            mps_root=self._mps_root,
        )  # fmt: skip
        if self._device_metadata and self._data_dir is not None:
            plan = with_device_metadata(
                plan, model, results, inventory, driver=self.driver, data_dir=self._data_dir, pci_gpus=pci
            )
        bindings = [
            VfioBindingRecord(pci_bus_id=t.pci_bus_id, device_name=t.name)
            for r in results
            if (t := targets[r.device]).pci_bus_id is not None
        ]
        if bindings:
            await self.store.transition(
                ref.uid, "PrepareStarted", namespace=ref.namespace, name=ref.name, vfio_bindings=bindings
            )
            self.hook("vfio_planned")
            await self._bind(bindings)
            self.hook("vfio_bound")
        return plan

    async def _bind(self, bindings: Sequence[VfioBindingRecord]) -> None:
        try:
            for binding in bindings:
                await asyncio.to_thread(self._backend.bind_vfio, binding.pci_bus_id)
        finally:
            self._hardware_changed()

    async def _give_back(self, bindings: Sequence[VfioBindingRecord]) -> None:
        """Back to the nvidia driver; a GPU that cannot go back keeps the claim recorded (the kubelet retries)."""
        try:
            for binding in bindings:
                await asyncio.to_thread(self._backend.unbind_vfio, binding.pci_bus_id)
        finally:
            self._hardware_changed()

    async def _get_claim(self, ref: ClaimRef) -> dict[str, Any]:
        try:
            return await self._client.get(RESOURCE_CLAIMS, ref.name, ref.namespace)
        except NotFoundError as exc:
            raise PrepareError(
                f"ResourceClaim {ref.namespace}/{ref.name} not found (deleted?)", reason="ClaimNotFound"
            ) from exc

    async def _execute(
        self,
        ref: ClaimRef,
        results: Sequence[DeviceRequestAllocationResult],
        plan_of: Callable[[], Awaitable[ClaimPlan]],
    ) -> ClaimPlan:
        """Refuse devices another claim holds, then plan (``plan_of``, which may already record and create
        dynamic MIG instances) and carry the plan out; anything recorded is undone when a step fails."""
        keys = {(r.pool, r.device) for r in results}
        holders: dict[str, Iterable[DeviceKey]] = {
            uid: [(d.pool_name, d.device_name) for d in e.devices] for uid, e in self.store.claims().items()
        }
        holders.update(self._in_flight)
        problems = conflicts(ref.uid, sorted(keys), holders, shareable=frozenset(self._shareable()))
        if problems:
            raise PrepareError(
                "; ".join(problems) + "; refusing to hand one device to two claims", reason="DeviceInUse"
            )
        # No await between the check above and this reservation: concurrent prepares see each other.
        self._in_flight[ref.uid] = keys
        before = self.store.get(ref.uid)
        try:
            seen = self._repartitions
            plan = await plan_of()
            if seen != self._repartitions:
                raise PrepareError(
                    "the node's MIG devices were repartitioned while preparing; the kubelet will retry",
                    reason="Repartitioned",
                )
            entry = await self.store.transition(
                ref.uid, "PrepareStarted", namespace=ref.namespace, name=ref.name,
                devices=plan.devices, configs=plan.configs, cdi_document=plan.cdi_document,
            )  # fmt: skip
            self.hook("prepare_started")
            await self._apply_sharing(entry)
            await asyncio.to_thread(write_files, plan.metadata_files)
            path = await asyncio.to_thread(self.specs.write_document, ref.uid, plan.cdi_document)
            self.hook("cdi_written")
            self.hook("before_prepare_completed")
            await self.store.transition(ref.uid, "PrepareCompleted", cdi_spec=str(path))
            self.hook("prepare_completed")
            return plan
        except Exception:
            recorded = self.store.get(ref.uid)
            if recorded is not None and recorded is not before:
                log.warning("prepare failed midway; rolling back", uid=ref.uid)
                await self.undo(ref.uid, recorded)
            raise
        finally:
            self._in_flight.pop(ref.uid, None)

    async def _create_instances(self, uid: str, creations: Sequence[InstanceCreation]) -> NodeInventory:
        """Create the planned MIG instances, record their ids, and return the inventory that holds them."""
        created = await asyncio.to_thread(self._instances.create, uid, creations)
        self.hook("instances_created")
        await self.store.transition(uid, "PrepareStarted", mig_instances_created=created)
        self.hook("instances_recorded")
        return await asyncio.to_thread(self._backend.read_inventory)

    async def _ensure_spec(self, uid: str, entry: ClaimEntry) -> None:
        if entry.cdi_document is not None and await asyncio.to_thread(self.specs.read, uid) is None:
            log.warning("CDI spec of a prepared claim was missing; rewritten", uid=uid)
            await asyncio.to_thread(self.specs.write_document, uid, entry.cdi_document)

    # -- devices held, for the MIG applier -------------------------------------------------------------------

    def holders(self) -> dict[DeviceKey, str]:
        """Every device a claim holds or is being prepared with -> the claim ("namespace/name", or the UID
        while its prepare has not reached the checkpoint)."""
        held: dict[DeviceKey, str] = {}
        for uid, keys in self._in_flight.items():
            held.update({key: uid for key in keys})
        for entry in self.store.claims().values():
            held.update(
                {(d.pool_name, d.device_name): f"{entry.namespace}/{entry.name}" for d in entry.devices}
            )
        return held

    def reserve_devices(self, holder: str, keys: Collection[DeviceKey]) -> list[str]:
        """Atomically (no await): the claims holding any of ``keys``, or, when none does, reserve them for
        ``holder`` so that prepares of them are refused until :meth:`release_devices`."""
        held = self.holders()
        claims = sorted({held[key] for key in keys if key in held and held[key] != holder})
        if not claims:
            self._in_flight[holder] = set(keys)
        return claims

    def release_devices(self, holder: str) -> None:
        """End a reservation; prepares that read the hardware before it re-read it (the kubelet retries)."""
        if self._in_flight.pop(holder, None) is not None:
            self._repartitions += 1

    # -- unprepare -------------------------------------------------------------------------------------------

    async def _unprepare_one(self, ref: ClaimRef) -> UnprepareResult:
        started = time.monotonic()
        entry: ClaimEntry | None = None
        try:
            async with self.store.claim_lock(ref.uid):
                entry = self.store.get(ref.uid)
                if entry is None:
                    await asyncio.to_thread(self.specs.delete, ref.uid)  # a file no entry owns
                else:
                    await self.store.transition(ref.uid, "UnprepareStarted")
                    self.hook("unprepare_started")
                    await self.undo(ref.uid, entry, hooked=True)
                if self._planner is not None:
                    await self._planner.released(ref.uid, entry)
        except GpudraError as exc:
            error = _as_prepare_error(exc)
            log.warning("unprepare failed", uid=ref.uid, error=str(error))
            self._count("unprepare", "failed", error.reason)
            return UnprepareResult(error=str(error))
        finally:
            if self._metrics is not None:
                self._metrics.unprepare_seconds.labels(self.node).observe(time.monotonic() - started)
        if entry is not None:
            await self.status.unprepared(ref)
        self._count("unprepare", "ok")
        return UnprepareResult()

    async def undo(self, uid: str, entry: ClaimEntry, *, hooked: bool = False) -> None:
        """Undo a (possibly partial) prepare: sharing settings, the CDI spec, then the checkpoint entry.
        Sharing that cannot be undone (a lost GPU) is logged, not fatal: pods must not stay Terminating. A GPU
        another claim still holds (a shared GPU) keeps its settings until the last claim is unprepared."""
        held = {d.uuid for other, e in self.store.claims().items() if other != uid for d in e.devices}
        for action in sharing_actions(entry.devices, entry.configs):
            if action.gpu_uuid in held:
                continue
            try:
                if action.exclusive_process:
                    await asyncio.to_thread(self._backend.set_compute_mode, action.gpu_uuid, False)
                if action.time_slice is not None:
                    await asyncio.to_thread(self._backend.set_time_slice, action.gpu_uuid, 0)
            except HardwareError as exc:
                log.warning("could not undo a sharing setting", uid=uid, gpu=action.gpu_uuid, error=str(exc))
        await asyncio.to_thread(self.specs.delete, uid)
        if self._data_dir is not None:
            await asyncio.to_thread(remove_claim_files, self._data_dir, entry.namespace, entry.name)
        if hooked:
            self.hook("cdi_deleted")
        if entry.mig_instances_created:
            await asyncio.to_thread(self._instances.destroy, uid, entry.mig_instances_created)
            if hooked:
                self.hook("instances_destroyed")
        if entry.vfio_bindings:
            await self._give_back(entry.vfio_bindings)
            if hooked:
                self.hook("vfio_released")
        await self.store.remove(uid)

    async def _apply_sharing(self, entry: ClaimEntry) -> None:
        for action in sharing_actions(entry.devices, entry.configs):
            if action.exclusive_process:
                await asyncio.to_thread(self._backend.set_compute_mode, action.gpu_uuid, True)
            if action.time_slice is not None:
                await asyncio.to_thread(self._backend.set_time_slice, action.gpu_uuid, action.time_slice)

    async def instances_lost(self, uid: str, entry: ClaimEntry) -> bool:
        """Whether a dynamic MIG instance recorded for the claim is gone from its (present) GPU."""
        if not entry.mig_instances_created:
            return False
        return await asyncio.to_thread(self._instances.lost, uid, entry.mig_instances_created)

    async def restore(self, uid: str, entry: ClaimEntry) -> bool:
        """At start-up: re-apply a completed claim's sharing and vfio binding, and rewrite its CDI spec when it is
        missing or differs (a reboot wipes /var/run/cdi). True when the spec was rewritten."""
        try:
            await self._apply_sharing(entry)
            if entry.vfio_bindings:
                await self._bind(entry.vfio_bindings)
        except HardwareError as exc:
            log.error(
                "could not re-apply sharing or vfio binding of a prepared claim", uid=uid, error=str(exc)
            )
        if entry.cdi_document is None:
            log.warning("prepared claim has no CDI document in the checkpoint; cannot regenerate", uid=uid)
            return False
        if await asyncio.to_thread(self.specs.read, uid) == entry.cdi_document:
            return False
        await asyncio.to_thread(self.specs.write_document, uid, entry.cdi_document)
        return True

    async def report_health(self, *, refresh: bool = False) -> None:
        """See :meth:`ClaimStatus.report_health`."""
        await self.status.report_health(self.store, refresh=refresh)

    # -- metrics ---------------------------------------------------------------------------------------------

    def _count(self, operation: str, result: str, reason: str = "") -> None:
        if self._metrics is None:
            return
        counter = (
            self._metrics.prepare_requests if operation == "prepare" else self._metrics.unprepare_requests
        )
        counter.labels(self.node, result).inc()
        if reason:
            self._metrics.prepare_errors.labels(self.node, operation, reason).inc()

    def _update_gauge(self) -> None:
        if self._metrics is None:
            return
        count = sum(len(e.devices) for e in self.store.claims().values() if e.state == "PrepareCompleted")
        self._metrics.prepared_devices.labels(self.node).set(count)
