"""The node agent's MIG applier: takes this node's GPUs to a desired state, step by step, safely.

One pass (:meth:`MigApplier.apply`): read the GPUs, resolve the desired entries per GPU (an invalid layout
stops here, hardware untouched), plan each GPU with :func:`gpudra.mig.plan.plan_gpu` against the devices that
prepared claims hold, checkpoint the targets (:class:`PlanJournal`), then run the steps, re-reading the
hardware after each one. Without ``allowPartial`` a node changes all its GPUs or none: one GPU blocked by an
in-use device blocks the node, and the next pass (after the claim is released) proceeds by itself.

Safety against a concurrent prepare: before a step that destroys a device or changes a GPU's MIG mode, the
applier atomically checks that no claim holds (or is being prepared with) the devices involved and reserves
them in the kubelet plugin's device reservations (:class:`DeviceHolders`); a prepare that reaches them meanwhile
is refused and retried by the kubelet. A MIG mode change that waits for a GPU reset is reported
(``reset-required``) and not retried until the hardware shows the reset happened.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gpudra.agent.miglayout.facts import NodeMigFacts, models_of
from gpudra.agent.miglayout.journal import PlanJournal
from gpudra.agent.prepareplan import DeviceKey, device_targets
from gpudra.agent.startreading import StartReading
from gpudra.errors import HardwareError, HardwareNotFound, InvalidInputError
from gpudra.hardware.gpus.backend import GpuBackend, MigModeResult
from gpudra.hardware.gpus.catalog import Catalog, MigModel, load_catalog
from gpudra.hardware.gpus.inventory import GpuInfo, NodeInventory
from gpudra.mig import (
    CreateMigDevice,
    DesiredState,
    DestroyMigDevice,
    GpuMigFacts,
    GpuReport,
    MigLayout,
    MigPlan,
    NodeGpu,
    NodeReport,
    NodeState,
    PlanStatus,
    ResetGpu,
    SetMigMode,
    Step,
    gpu_layouts,
    place_for_gpu,
    plan_gpu,
    state_of_gpu,
)
from gpudra.telemetry import get_logger

log = get_logger(__name__)
HOLDER = "MIG repartitioning"


class DeviceHolders(Protocol):
    """Who holds which device, as the kubelet plugin tells the applier
    (:class:`gpudra.agent.reservations.DeviceReservations`)."""

    def holders(self) -> dict[DeviceKey, str]:
        """Every device a claim holds or is being prepared with -> the claim ("namespace/name" or its UID)."""
        ...

    def reserve_devices(self, holder: str, keys: Collection[DeviceKey]) -> list[str]:
        """Atomically: the claims holding any of ``keys`` (nothing reserved then), or reserve them for
        ``holder`` (prepares of them are refused) and return []."""
        ...

    def release_devices(self, holder: str) -> None: ...


class NoHolders:
    """For an agent that does not serve the kubelet plugin: nothing is ever prepared on this node."""

    def holders(self) -> dict[DeviceKey, str]:
        return {}

    def reserve_devices(self, holder: str, keys: Collection[DeviceKey]) -> list[str]:
        return []

    def release_devices(self, holder: str) -> None:
        return None


class _StepRefused(Exception):
    """A claim took a device between planning and the step; the next pass re-plans."""

    def __init__(self, gpu_index: int, claims: list[str]) -> None:
        super().__init__(f"GPU {gpu_index}: devices became in use by {', '.join(claims)}")
        self.claims = claims


@dataclass
class _Pass:
    """What one pass learned, per GPU."""

    states: dict[int, GpuReport] = field(default_factory=dict)
    blocked_by: set[str] = field(default_factory=set)
    changed: bool = False


def by_minor(inventory: NodeInventory) -> NodeInventory:
    """The reading with each GPU's ``index`` (and its MIG devices' ``parent_index``) set to its minor number.

    A MigLayout names GPUs by index, and the applier keys its plans, journal and reports by it: the minor
    (``/dev/nvidia<minor>``, the ``gpu-<minor>`` device name) is the NVML index until a GPU before it is bound
    to vfio-pci, and unlike the NVML index it stays the GPU's own while one is."""
    return inventory.model_copy(
        update={
            "gpus": tuple(
                gpu.model_copy(
                    update={
                        "index": gpu.minor,
                        "mig_devices": tuple(
                            m.model_copy(update={"parent_index": gpu.minor}) for m in gpu.mig_devices
                        ),
                    }
                )
                for gpu in inventory.gpus
            )
        }
    )


class MigApplier:
    def __init__(
        self,
        backend: GpuBackend,
        journal: PlanJournal,
        *,
        node: str,
        holders: DeviceHolders | None = None,
        mark_dynamic: Callable[[frozenset[str] | None], None] | None = None,
        catalog: Catalog | None = None,
        start: StartReading | None = None,
    ) -> None:
        self._backend = backend
        self._start = start
        self._indices: tuple[dict[int, int], int | None] = ({}, None)
        """Minor -> NVML index in the last reading, and the backend's change mark before it."""
        self._journal = journal
        self._node = node
        self._holders = holders or NoHolders()
        self._mark_dynamic = mark_dynamic
        self._facts = NodeMigFacts(
            catalog or load_catalog(),
            lambda gpu: self._backend.mig_profiles(self._index_as_read(gpu.minor)),
            node=node,
        )

    async def read(self) -> NodeInventory:
        """A reading in which each GPU's ``index`` is its minor (see :func:`by_minor`): the agent's start reading
        while it is current (:class:`StartReading`), else a new one."""
        reading = self._start.current() if self._start is not None else None
        if reading is not None:
            inventory, mark = reading.inventory, reading.mark
        else:
            mark = self._backend.changes.mark()
            inventory = await asyncio.to_thread(self._backend.read_inventory, nvlink_peers=False)
        self._indices = ({gpu.minor: gpu.index for gpu in inventory.gpus}, mark)
        return by_minor(inventory)

    def _index_as_read(self, minor: int) -> int:
        """The NVML index of the GPU ``/dev/nvidia<minor>`` in the last reading while gpudra changed no GPU since
        it began (no vfio binding moved the indices), else as NVML says now."""
        indices, mark = self._indices
        if minor in indices and self._backend.changes.none_since(mark):
            return indices[minor]
        return self._nvml_index(minor)

    def _nvml_index(self, minor: int) -> int:
        """The NVML index of the GPU ``/dev/nvidia<minor>`` now, for the backend's calls (on the calling thread,
        just before the call)."""
        gpu = next(
            (g for g in self._backend.read_inventory(nvlink_peers=False).gpus if g.minor == minor), None
        )
        if gpu is None:
            raise HardwareNotFound(f"GPU {minor} (/dev/nvidia{minor}) of node {self._node} is not in NVML")
        return gpu.index

    def _create(self, minor: int, profile: str, start: int) -> None:
        self._backend.create_mig_device(self._nvml_index(minor), profile, start)

    def _destroy(self, minor: int, gi_id: int) -> None:
        self._backend.destroy_mig_device(self._nvml_index(minor), gi_id)

    def _set_mode(self, minor: int, enabled: bool) -> MigModeResult:
        return self._backend.set_mig_mode(self._nvml_index(minor), enabled)

    async def report_gpus(self) -> NodeReport:
        """Only this node's GPUs (no desired state yet): lets the controller validate layouts early. No MigLayout
        governs the node, so the agent's own ``mig_policy`` setting decides which GPUs are dynamic."""
        self._hand_dynamic(None)
        gpus, facts = await asyncio.to_thread(self._facts.read, await self.read())
        return NodeReport(gpus=gpus, models=facts)

    async def apply(self, desired: DesiredState) -> tuple[NodeReport, bool]:
        """One pass toward ``desired``: the report, and whether the hardware changed (republish then)."""
        inventory = await self.read()
        gpus, facts = await asyncio.to_thread(self._facts.read, inventory)
        models = models_of(facts)
        try:
            layouts, problems = gpu_layouts(desired.entries, gpus, models)
        except InvalidInputError as exc:
            layouts, problems = {}, [str(exc)]
        if problems:
            message = f"{desired.key} is invalid on this node: " + "; ".join(problems)
            log.warning("MIG layout invalid; hardware untouched", node=self._node, problems=problems)
            report = NodeReport(key=desired.key, state="invalid", message=message, gpus=gpus, models=facts)
            return report, False
        if desired.policy == "Dynamic":
            result = await self._apply_dynamic(inventory, layouts)
        else:
            self._hand_dynamic(frozenset())
            result = await self._apply_static(desired, inventory, layouts, gpus, models)
        return self._report(desired, gpus, facts, result), result.changed

    # -- static --------------------------------------------------------------------------------------------

    def _plans(
        self,
        inventory: NodeInventory,
        targets: Mapping[int, MigLayout],
        models: Mapping[int, MigModel],
        allow_partial: bool,
        resumed: bool,
    ) -> tuple[dict[int, MigPlan], dict[str, str]]:
        """Each GPU's plan against the devices held now, and held device UUID -> claim. A fresh pass places
        each target's counts with the fewest changes (:func:`place_for_gpu`); a resumed one keeps the saved
        placements."""
        named = device_targets(inventory)
        held = {
            named[device].uuid: claim
            for (pool, device), claim in self._holders.holders().items()
            if pool == self._node and device in named
        }
        plans = {}
        for gpu in inventory.gpus:
            model = models.get(gpu.index)
            if gpu.index in targets and model is not None:
                state = state_of_gpu(gpu, model.model_id)
                target = targets[gpu.index]
                if not resumed:
                    target = place_for_gpu(model, state, target, set(held))
                plans[gpu.index] = plan_gpu(model, state, target, set(held), allow_partial=allow_partial)
        return plans, held

    async def _apply_static(
        self,
        desired: DesiredState,
        inventory: NodeInventory,
        layouts: dict[int, MigLayout],
        gpus: tuple[NodeGpu, ...],
        models: Mapping[str, MigModel],
    ) -> _Pass:
        result = _Pass()
        by_index = {g.index: g for g in inventory.gpus}
        waiting = {i for i in layouts if _reset_pending(by_index[i], layouts[i])}
        for index in waiting:
            result.states[index] = GpuReport(
                index=index, state="reset-required",
                message=f"GPU {index}: the MIG mode change waits for a GPU reset (nvidia-smi -r, or a reboot)",
            )  # fmt: skip
        saved = self._journal.load(desired.key)
        if saved is not None:
            log.info(
                "resuming an unfinished MIG plan", node=self._node, layout=desired.key, steps_done=saved[1]
            )
        targets = {i: (saved[0].get(i, layout) if saved else layout) for i, layout in layouts.items()}
        plans, held = self._plans(
            inventory,
            {i: t for i, t in targets.items() if i not in waiting},
            {g.index: models[g.model] for g in gpus if g.model in models},
            desired.allow_partial,
            resumed=saved is not None,
        )
        for plan in plans.values():
            busy = [held.get(i.uuid, i.uuid) for i in plan.blocked_by]
            if plan.gpu_in_use:
                gpu = by_index[plan.gpu_index]
                busy.append(held.get(gpu.uuid, gpu.uuid))
            result.blocked_by.update(busy)
            if plan.status is PlanStatus.BLOCKED:
                result.states[plan.gpu_index] = GpuReport(
                    index=plan.gpu_index, state="blocked", message=plan.message
                )
        if result.blocked_by and not desired.allow_partial:
            for plan in plans.values():
                result.states.setdefault(
                    plan.gpu_index,
                    GpuReport(index=plan.gpu_index, state="blocked" if plan.steps else "success",
                              message=plan.message if plan.steps else ""),
                )  # fmt: skip
            return result
        steps = [(plan, step) for plan in plans.values() for step in plan.steps]
        if steps:
            final = {i: plans[i].target if i in plans else t for i, t in targets.items()}
            done_before = saved[1] if saved else 0
            self._journal.save(desired.key, final, done_before)
            await self._run_steps(desired.key, final, steps, result, done_before)
        self._journal.clear()  # the pass ran to its end: nothing to resume; the next pass re-plans
        after = {g.index: g for g in (await self.read()).gpus}
        for index, plan in plans.items():
            if index in result.states:
                continue
            if state_of_gpu(after[index], "").layout != plan.target:
                result.states[index] = GpuReport(
                    index=index, state="pending", message=f"GPU {index}: not yet {plan.target}"
                )
            elif plan.status is PlanStatus.PARTIAL:
                result.states[index] = GpuReport(index=index, state="blocked", message=plan.message)
            else:
                result.states[index] = GpuReport(index=index, state="success")
        return result

    async def _run_steps(
        self,
        key: str,
        targets: dict[int, MigLayout],
        steps: list[tuple[MigPlan, Step]],
        result: _Pass,
        steps_done: int,
    ) -> None:
        stopped: set[int] = set()
        for plan, step in steps:
            index = plan.gpu_index
            if index in stopped:
                continue
            try:
                state = await self._run_step(step)
            except _StepRefused as exc:
                stopped.add(index)
                result.blocked_by.update(exc.claims)
                result.states[index] = GpuReport(index=index, state="blocked", message=str(exc))
                continue
            except HardwareError as exc:
                stopped.add(index)
                log.error("MIG step failed", node=self._node, step=repr(step), error=str(exc))
                result.states[index] = GpuReport(index=index, state="failed", message=f"GPU {index}: {exc}")
                continue
            result.changed = True
            steps_done += 1
            self._journal.save(key, targets, steps_done)
            if state is not None:
                stopped.add(index)
                result.states[index] = state

    async def _run_step(self, step: Step) -> GpuReport | None:
        """Run one step; a report when the GPU must stop here (a reset is required)."""
        if isinstance(step, CreateMigDevice):
            await asyncio.to_thread(self._create, step.gpu_index, step.profile, step.start)
            return None
        if isinstance(step, ResetGpu):
            return None  # set_mig_mode said the mode is in effect: no reset needed
        inventory = await self.read()  # re-read under the reservation: plans may be stale by now
        named = device_targets(inventory)
        gpu = next(g for g in inventory.gpus if g.index == step.gpu_index)
        if isinstance(step, DestroyMigDevice):
            keys = {(self._node, t.name) for t in named.values() if t.uuid == step.uuid}
        else:
            keys = {(self._node, t.name) for t in named.values() if t.gpu_uuid == gpu.uuid}
        holders = self._holders.reserve_devices(HOLDER, keys)
        if holders:
            raise _StepRefused(step.gpu_index, holders)
        try:
            if isinstance(step, DestroyMigDevice):
                await asyncio.to_thread(self._destroy, step.gpu_index, step.gi_id)
                return None
            mode = await asyncio.to_thread(self._set_mode, step.gpu_index, step.enabled)
        finally:
            self._holders.release_devices(HOLDER)
        if mode.reset_required:
            log.warning("MIG mode change waits for a GPU reset", node=self._node, gpu=step.gpu_index,
                        activation=mode.activation_code)  # fmt: skip
            word = "enabled" if step.enabled else "disabled"
            return GpuReport(
                index=step.gpu_index, state="reset-required",
                message=f"GPU {step.gpu_index}: MIG {word} after a GPU reset ({mode.activation_code}); "
                "reset the GPU (nvidia-smi -r) or reboot the node",
            )  # fmt: skip
        return None

    # -- dynamic -------------------------------------------------------------------------------------------

    async def _apply_dynamic(self, inventory: NodeInventory, layouts: dict[int, MigLayout]) -> _Pass:
        """Dynamic policy: MIG enabled on the selected GPUs (instances come and go with claims), then the agent
        is told which GPUs are dynamic."""
        result = _Pass()
        selected = {i for i, layout in layouts.items() if layout.mig_enabled}
        by_index = {g.index: g for g in inventory.gpus}
        for index in sorted(selected):
            gpu = by_index[index]
            if gpu.mig_enabled:
                result.states[index] = GpuReport(index=index, state="dynamic")
                continue
            if gpu.mig_pending:
                result.states[index] = GpuReport(index=index, state="reset-required",
                                                 message=f"GPU {index}: MIG enabled after a GPU reset")  # fmt: skip
                continue
            try:
                state = await self._run_step(SetMigMode(index, True))
            except (_StepRefused, HardwareError) as exc:
                result.blocked_by.update(exc.claims if isinstance(exc, _StepRefused) else ())
                result.states[index] = GpuReport(
                    index=index,
                    state="blocked" if isinstance(exc, _StepRefused) else "failed",
                    message=str(exc),
                )
                continue
            result.changed = True
            result.states[index] = state or GpuReport(index=index, state="dynamic")
        self._hand_dynamic(
            frozenset(by_index[i].uuid for i, s in result.states.items() if s.state == "dynamic")
        )
        return result

    def _hand_dynamic(self, gpus: frozenset[str] | None) -> None:
        """The Dynamic policy's single call site into the node agent: which GPUs (by UUID) follow claims (none
        unless the node's desired policy is Dynamic; None when no MigLayout governs the node)."""
        if self._mark_dynamic is not None:
            self._mark_dynamic(gpus)

    # -- report --------------------------------------------------------------------------------------------

    def _report(
        self, desired: DesiredState, gpus: tuple[NodeGpu, ...], facts: tuple[GpuMigFacts, ...], result: _Pass
    ) -> NodeReport:
        states = tuple(sorted(result.states.values(), key=lambda s: s.index))
        kinds = {s.state for s in states}
        node_state: NodeState
        if "failed" in kinds:
            node_state = "failed"
        elif "blocked" in kinds:
            node_state = "blocked"
        elif kinds <= {"success", "dynamic", "skipped"}:
            node_state = "success"
        else:
            node_state = "pending"
        messages = [s.message for s in states if s.message]
        if node_state == "blocked" and result.blocked_by:
            messages.insert(0, "in use by " + ", ".join(sorted(result.blocked_by)))
        if node_state == "success":
            messages = [f"{desired.key} applied"]
        return NodeReport(
            key=desired.key,
            state=node_state,
            message="; ".join(messages),
            blocked_by=tuple(sorted(result.blocked_by)) if node_state == "blocked" else (),
            gpus=gpus,
            models=facts,
            gpu_states=states,
        )


def _reset_pending(gpu: GpuInfo, layout: MigLayout) -> bool:
    """The GPU's pending MIG mode is the desired one but waits for a reset: nothing to call, only to report."""
    return gpu.mig_enabled != gpu.mig_pending and gpu.mig_pending == layout.mig_enabled
