"""ClaimPreparer: the node agent's answer to the kubelet's NodePrepareResources / NodeUnprepareResources.

Prepare of one claim, under that claim's checkpoint lock (other claims run in parallel, there is no global lock):
GET the ResourceClaim, check its UID and allocation, take the results of this driver on this node, map them to
the GPUs and MIG devices present now, resolve the opaque configs, refuse devices another claim holds, then

    [dynamic MIG: checkpoint PrepareStarted (placements to create) -> instances created -> checkpoint (their
    ids)] -> checkpoint PrepareStarted (with the plan) -> sharing settings -> CDI spec written -> PrepareCompleted

or, for a claim whose only change on the node is its CDI spec (no sharing settings, MIG instances, vfio
binding, device metadata files or directories: a whole GPU or a static MIG device without a config), with one
checkpoint write instead of two: CDI spec written -> PrepareCompleted (a spec no entry owns is deleted at start),
and its unprepare too: CDI spec deleted -> entry removed (a crash between leaves it prepared, the spec rewritten
at the start, until the kubelet's unprepare comes again),

then answer the kubelet; ``status.devices`` Ready is written on the claim after the answer, in the background,
once the node answers no call (:mod:`gpudra.agent.laterwrites`; the pod's start does not wait for it). A failure
after PrepareStarted is rolled back at once, and so is a prepare cancelled because the kubelet gave up on the call
(the hardware step in progress ends first, the rollback runs to its end, then the cancellation goes on); a crash is
repaired at the next start (:mod:`gpudra.agent.recovery`). A second prepare of a completed claim answers from the
checkpoint. Unprepare undoes exactly what the checkpoint says was done, and an unknown claim is a success.

This module holds the protocol: the order of the steps and what the checkpoint records before each. It composes
:class:`DeviceReservations` (who holds which device: :mod:`gpudra.agent.reservations`), :class:`ClaimEffects`
(the hardware and file changes themselves: :mod:`gpudra.agent.claimeffects`), :class:`ClaimStatus` (what the
claim shows) and :class:`PrepareMetrics`.

The GPU driver's plan (which GPUs and MIG devices, sharing settings, CDI edits) is the default: a pure function
of the claim and the node's inventory (:func:`gpudra.agent.gpuplanner.plan_gpu_claim`) that this module reads
for and applies. Another driver served by the same machinery (the compute-domain driver) passes its own
``planner``, which decides the plan of a claim and is told when a claim was released.

Passthrough (``PrepareOptions.passthrough``): a ``gpu-vfio-<i>`` device's GPU is recorded (checkpoint
PrepareStarted with ``vfio_bindings``) and then bound to vfio-pci, after the plan (and its CDI spec, with
/dev/vfio/<group>) is decided and before the plan is recorded; undo, unprepare and start-up recovery give the
recorded GPUs back to the nvidia driver after the CDI spec is gone, and start-up binds a completed claim's GPU
again (a reboot gave it back).

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
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Protocol

from gpudra.agent.checkpoint import CheckpointStore, ClaimEntry
from gpudra.agent.claimeffects import ClaimEffects
from gpudra.agent.claimstatus import ClaimStatus
from gpudra.agent.gpuplanner import LatestTargets, PrepareOptions, plan_gpu_claim
from gpudra.agent.kubeletplugin.messages import ClaimRef, PrepareResult, UnprepareResult
from gpudra.agent.migdynamic.decisions import InstanceCreation, plan_instances
from gpudra.agent.migdynamic.instances import with_instances
from gpudra.agent.preparemetrics import PrepareMetrics
from gpudra.agent.prepareplan import (
    ClaimPlan,
    only_its_spec,
    prepared_devices,
    recorded_only_its_spec,
    select_results,
)
from gpudra.agent.reservations import DeviceReservations
from gpudra.agent.uninterrupted import to_the_end
from gpudra.api.dra import DeviceRequestAllocationResult, ResourceClaim
from gpudra.errors import (
    CheckpointError,
    GpudraError,
    HardwareError,
    KubeError,
    NotFoundError,
    PrepareError,
)
from gpudra.hardware.gpus.backend import GpuBackend
from gpudra.hardware.gpus.inventory import NodeInventory
from gpudra.kube.client import KubeClient
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
    """PluginHandler of one driver on this node (its driver and node are ``status``'s). ``dynamic_gpus``: the
    UUIDs of the GPUs in dynamic MIG mode now."""

    def __init__(
        self,
        *,
        client: KubeClient,
        backend: GpuBackend,
        store: CheckpointStore,
        status: ClaimStatus,
        reservations: DeviceReservations,
        effects: ClaimEffects,
        options: PrepareOptions | None = None,
        dynamic_gpus: Callable[[], Collection[str]] = frozenset,
        metrics: Metrics | None = None,
        planner: ClaimPlanner | None = None,
        hook: Hook = no_hook,
        shared_pool: Callable[[str], bool] | None = None,
    ) -> None:
        self._client = client
        self._backend = backend
        self.store = store
        self.status = status
        self.reservations = reservations
        self.effects = effects
        self.driver = status.driver
        self.node = status.node
        self._options = options or PrepareOptions()
        self._dynamic_gpus = dynamic_gpus
        self._metrics = PrepareMetrics(metrics, node=status.node, store=store)
        self._planner = planner
        self.hook = hook
        self._shared_pool = shared_pool
        """Which pools are not node-local (their devices are prepared wherever a pod of the claim runs)."""
        self._targets = LatestTargets()

    # -- PluginHandler ---------------------------------------------------------------------------------------

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        with self.status.later.calls.one():
            results = await asyncio.gather(*(self._prepare_one(ref) for ref in claims))
        return {ref.uid: result for ref, result in zip(claims, results, strict=True)}

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, UnprepareResult]:
        with self.status.later.calls.one():
            results = await asyncio.gather(*(self._unprepare_one(ref) for ref in claims))
        return {ref.uid: result for ref, result in zip(claims, results, strict=True)}

    async def report_health(self, *, refresh: bool = False) -> None:
        """See :meth:`ClaimStatus.report_health`."""
        await self.status.report_health(self.store, refresh=refresh)

    # -- prepare ---------------------------------------------------------------------------------------------

    async def _prepare_one(self, ref: ClaimRef) -> PrepareResult:
        try:
            with self._metrics.timed("prepare"):
                async with self.store.claim_lock(ref.uid):
                    result = await self._prepare_locked(ref)
        except PrepareError as exc:
            log.warning("prepare failed", claim=f"{ref.namespace}/{ref.name}", uid=ref.uid, error=str(exc))
            self._metrics.count("prepare", "failed", exc.reason)
            return PrepareResult(error=str(exc))
        self._metrics.count("prepare", "ok")
        return result

    async def _prepare_locked(self, ref: ClaimRef) -> PrepareResult:
        entry = self.store.get(ref.uid)
        if entry is not None and entry.state == "PrepareCompleted":
            await self.effects.ensure_spec(ref.uid, entry)
            return PrepareResult(devices=prepared_devices(entry.devices))
        claim: ResourceClaim | None = None
        results: list[DeviceRequestAllocationResult] = []
        try:
            if entry is not None:
                # an earlier prepare's rollback (or an unprepare) failed halfway: a GPU may still be off its
                # driver or hold an instance. Finish that first, so this prepare starts from the GPU's state
                # before the claim; when it still cannot be undone, the entry stays for the next try.
                log.warning(
                    "finishing the rollback of an earlier prepare first", uid=ref.uid, state=entry.state
                )
                await to_the_end(self.undo(ref.uid, entry))
            claim = model = await self._get_claim(ref)
            results = select_results(
                model, ref, driver=self.driver, node=self.node, shared_pool=self._shared_pool
            )
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
            self.status.later.soon(ref.uid, self.status.failed(ref, claim, results, error))
            if error is exc:
                raise
            raise error from exc
        self.status.later.soon(ref.uid, self.status.prepared(ref, plan.devices, claim))
        return PrepareResult(devices=prepared_devices(plan.devices))

    async def _plan_gpus(
        self, ref: ClaimRef, model: ResourceClaim, results: Sequence[DeviceRequestAllocationResult]
    ) -> ClaimPlan:
        """Read what the GPU plan needs and apply it: dynamic MIG instances the results name are recorded and
        created first, and the GPUs of passthrough devices recorded and bound to vfio-pci last."""
        options = self._options
        dynamic = frozenset(self._dynamic_gpus())
        inventory = await self.effects.inventory.read()
        creations = (
            await asyncio.to_thread(
                plan_instances, results, inventory, dynamic, self.effects.instances.profiles_of
            )
            if dynamic
            else []  # no GPU in dynamic MIG mode: nothing to create, and no worker thread's hand-off to pay
        )
        if creations:
            await self.store.transition(
                ref.uid, "PrepareStarted", namespace=ref.namespace, name=ref.name,
                mig_instances_created=[c.record for c in creations],
            )  # fmt: skip
            self.hook("instances_planned")
            inventory = await self._create_instances(ref.uid, creations, inventory)
        pci = await asyncio.to_thread(self._backend.pci_gpus) if options.passthrough else ()
        plan = plan_gpu_claim(
            ref.uid, model, results, inventory, driver=self.driver, options=options, dynamic=dynamic,
            pci_gpus=pci, data_dir=self.effects.data_dir, targets=self._targets(inventory, dynamic, pci),
        )  # fmt: skip
        if plan.vfio_bindings:
            await self.store.transition(
                ref.uid, "PrepareStarted", namespace=ref.namespace, name=ref.name,
                vfio_bindings=list(plan.vfio_bindings),
            )  # fmt: skip
            self.hook("vfio_planned")
            await self.effects.bind(plan.vfio_bindings)
            self.hook("vfio_bound")
        return plan.claim

    async def _get_claim(self, ref: ClaimRef) -> ResourceClaim:
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
        with self.reservations.preparing(ref.uid, {(r.pool, r.device) for r in results}) as reservation:
            before = self.store.get(ref.uid)
            try:
                plan = await plan_of()
                reservation.check_not_repartitioned()
                if self.store.get(ref.uid) is None and only_its_spec(plan):
                    return await self._write_spec_and_record(ref, plan)
                entry = await self.store.transition(
                    ref.uid, "PrepareStarted", namespace=ref.namespace, name=ref.name,
                    devices=plan.devices, configs=plan.configs, cdi_document=plan.cdi_document,
                )  # fmt: skip
                self.hook("prepare_started")
                await self.effects.apply_sharing(entry)
                path = await self.effects.write_files(ref.uid, plan)
                self.hook("cdi_written")
                self.hook("before_prepare_completed")
                await self.store.transition(ref.uid, "PrepareCompleted", cdi_spec=str(path))
                self.hook("prepare_completed")
                return plan
            except (Exception, asyncio.CancelledError) as exc:
                recorded = self.store.get(ref.uid)
                if recorded is not None and recorded is not before:
                    cancelled = isinstance(exc, asyncio.CancelledError)
                    log.warning(
                        "prepare cancelled midway (the kubelet gave up on the call); rolling back"
                        if cancelled
                        else "prepare failed midway; rolling back",
                        uid=ref.uid,
                    )
                    # to its end under the claim's lock: the kubelet's unprepare, waiting for the lock, must not
                    # find a rollback half done
                    await to_the_end(self.undo(ref.uid, recorded))
                raise

    async def _write_spec_and_record(self, ref: ClaimRef, plan: ClaimPlan) -> ClaimPlan:
        """Prepare a claim whose only change on the node is its CDI spec with one checkpoint write: the spec,
        then the claim recorded PrepareCompleted. A crash between the two leaves a spec no entry owns, which the
        next start deletes, and the kubelet, which had no answer, prepares again; a failure or cancellation
        here deletes it at once."""
        try:
            path = await self.effects.write_files(ref.uid, plan)
            self.hook("cdi_written")
            self.hook("before_prepare_completed")
            await self.store.transition(
                ref.uid, "PrepareCompleted", namespace=ref.namespace, name=ref.name, devices=plan.devices,
                configs=plan.configs, cdi_document=plan.cdi_document, cdi_spec=str(path),
            )  # fmt: skip
        except (Exception, asyncio.CancelledError):
            if self.store.get(ref.uid) is None:
                log.warning(
                    "prepare failed or was cancelled before it was recorded; its spec goes", uid=ref.uid
                )
                await to_the_end(self.effects.remove_files(ref.uid, None))
            raise
        self.hook("prepare_completed")
        return plan

    async def _create_instances(
        self, uid: str, creations: Sequence[InstanceCreation], inventory: NodeInventory
    ) -> NodeInventory:
        """Create the planned MIG instances, record their ids, and return ``inventory`` with them (as NVML
        reported them: see :func:`with_instances`)."""
        created = await self.effects.create_instances(uid, creations)
        self.hook("instances_created")
        await self.store.transition(uid, "PrepareStarted", mig_instances_created=[c.record for c in created])
        self.hook("instances_recorded")
        return with_instances(inventory, [c.device for c in created])

    # -- unprepare -------------------------------------------------------------------------------------------

    async def _unprepare_one(self, ref: ClaimRef) -> UnprepareResult:
        entry: ClaimEntry | None = None
        try:
            with self._metrics.timed("unprepare"):
                async with self.store.claim_lock(ref.uid):
                    entry = self.store.get(ref.uid)
                    if entry is None:
                        await self.effects.remove_files(ref.uid, None)  # a file no entry owns
                    elif recorded_only_its_spec(entry):
                        # one write: a crash before it leaves the claim prepared, its spec rewritten at the
                        # start, and the kubelet, which had no answer, unprepares again
                        await self.effects.remove_files(ref.uid, entry)
                        self.hook("cdi_deleted")
                        await self.store.remove(ref.uid)
                    else:
                        await self.store.transition(ref.uid, "UnprepareStarted")
                        self.hook("unprepare_started")
                        await self.undo(ref.uid, entry, hooked=True)
                    if self._planner is not None:
                        await self._planner.released(ref.uid, entry)
        except GpudraError as exc:
            error = _as_prepare_error(exc)
            log.warning("unprepare failed", uid=ref.uid, error=str(error))
            self._metrics.count("unprepare", "failed", error.reason)
            return UnprepareResult(error=str(error))
        if entry is not None:
            self.status.later.soon(ref.uid, self.status.unprepared(ref))
        self._metrics.count("unprepare", "ok")
        return UnprepareResult()

    async def undo(self, uid: str, entry: ClaimEntry, *, hooked: bool = False) -> None:
        """Undo a (possibly partial) prepare: sharing settings (except on a GPU another claim still holds),
        the CDI spec and metadata files, dynamic MIG instances, vfio bindings, then the checkpoint entry."""
        held = {
            d.uuid
            for other, e in self.store.claims().items()
            if other != uid
            for d in e.devices
            if d.uuid is not None
        }
        await self.effects.undo_sharing(uid, entry, held=held)
        await self.effects.remove_files(uid, entry)
        if hooked:
            self.hook("cdi_deleted")
        if entry.mig_instances_created:
            await self.effects.destroy_instances(uid, entry.mig_instances_created)
            if hooked:
                self.hook("instances_destroyed")
        if entry.vfio_bindings:
            await self.effects.give_back(entry.vfio_bindings)
            if hooked:
                self.hook("vfio_released")
        await self.store.remove(uid)
