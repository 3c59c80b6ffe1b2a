"""Plans: the ordered steps that take one GPU from its current MIG layout to a desired one.

Order: destroy the MIG devices the desired layout does not keep (the backend removes a device's compute
instances before its GPU instance), then change the MIG mode (followed by a GPU reset when the driver asks for
one), then create the missing instances, each at its explicit placement. Instances found in ``in_use`` (GI ids
or MIG UUIDs of prepared claims; the GPU's own UUID marks the whole GPU busy) never appear in a destroy step:
a layout that needs them gone is Blocked, or, with ``allow_partial``, applied around them as far as it fits.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpudra.hardware.gpus.catalog import MigModel
from gpudra.mig.layout import (
    GpuMigState,
    InvalidLayoutError,
    MigInstance,
    MigLayout,
    Placement,
    mig_spec,
    span,
)
from gpudra.mig.validate import count_problems, search_placements, validate_layout


@dataclass(frozen=True)
class DestroyMigDevice:
    """``destroy_mig_device(gpu_index, gi_id)``: the compute instances, then the GPU instance."""

    gpu_index: int
    gi_id: int
    profile: str
    start: int
    uuid: str = ""


@dataclass(frozen=True)
class SetMigMode:
    """``set_mig_mode(gpu_index, enabled)``."""

    gpu_index: int
    enabled: bool


@dataclass(frozen=True)
class ResetGpu:
    """Reset the GPU so a MIG mode change takes effect; the applier runs it only when ``set_mig_mode`` reported
    that a reset is required (and fails the plan when the GPU is busy)."""

    gpu_index: int


@dataclass(frozen=True)
class CreateMigDevice:
    """``create_mig_device(gpu_index, profile, placement_start)``: a GPU instance and its full compute instance."""

    gpu_index: int
    profile: str
    start: int


Step = DestroyMigDevice | SetMigMode | ResetGpu | CreateMigDevice


class PlanStatus(StrEnum):
    NOOP = "NoOp"  # already as desired
    APPLY = "Apply"  # the steps reach the desired layout
    PARTIAL = "Partial"  # the steps reach part of it; in-use instances kept, ``not_applied`` left out
    BLOCKED = "Blocked"  # nothing to do safely; ``blocked_by`` names the in-use instances in the way


@dataclass(frozen=True)
class MigPlan:
    gpu_index: int
    status: PlanStatus
    current: MigLayout
    desired: MigLayout
    target: MigLayout  # what the steps reach (== current when blocked)
    steps: tuple[Step, ...] = ()
    blocked_by: tuple[MigInstance, ...] = ()
    gpu_in_use: bool = False  # the whole GPU (MIG disabled) is used and the MIG mode cannot change
    not_applied: tuple[Placement, ...] = ()

    @property
    def message(self) -> str:
        """One line for a status condition or an Event."""
        gpu = f"GPU {self.gpu_index}"
        if self.status is PlanStatus.NOOP:
            return f"{gpu}: already {self.desired}"
        if self.status is PlanStatus.APPLY:
            return f"{gpu}: {self.current} -> {self.target} in {len(self.steps)} step(s)"
        busy = ", ".join(str(i) for i in self.blocked_by) or "the whole GPU"
        if self.status is PlanStatus.BLOCKED:
            return f"{gpu}: blocked, {self.desired} needs in-use instances removed: {busy}"
        left = ", ".join(str(p) for p in self.not_applied)
        return f"{gpu}: partially applied around in-use {busy}; not applied: {left}"


def unchanged(state: GpuMigState) -> MigPlan:
    """The no-op plan of a GPU left as it is."""
    layout = state.layout
    return MigPlan(state.index, PlanStatus.NOOP, layout, layout, layout)


def _blocked(state: GpuMigState, desired: MigLayout, busy: Sequence[MigInstance], gpu: bool) -> MigPlan:
    return MigPlan(
        state.index,
        PlanStatus.BLOCKED,
        state.layout,
        desired,
        state.layout,
        blocked_by=tuple(busy),
        gpu_in_use=gpu,
    )


def _steps(state: GpuMigState, target: MigLayout) -> tuple[Step, ...]:
    keep = set(target.instances) if target.mig_enabled else set()
    steps: list[Step] = [
        DestroyMigDevice(state.index, i.gi_id, i.profile, i.start, i.uuid)
        for i in sorted(state.instances, key=lambda i: (i.start, i.profile))
        if i.placement not in keep
    ]
    if state.mig_enabled != target.mig_enabled:
        steps += [SetMigMode(state.index, target.mig_enabled), ResetGpu(state.index)]
    have = {i.placement for i in state.instances} if state.mig_enabled else set()
    steps += [CreateMigDevice(state.index, p.profile, p.start) for p in target.instances if p not in have]
    return tuple(steps)


def _fit_around(
    model: MigModel, fixed: Sequence[Placement], wanted: Sequence[Placement]
) -> tuple[tuple[Placement, ...], tuple[Placement, ...]]:
    """The most (by compute slices, then count) of ``wanted`` that fits beside ``fixed``, each kept at its
    desired start when possible; returns (placed, left out)."""
    spec = mig_spec(model)
    known = {p.name: p for p in spec.profiles}
    occupied = 0
    for p in fixed:
        occupied |= span(known[p.profile], p.start)
    fixed_counts = Counter(p.profile for p in fixed)
    prefer: dict[str, list[int]] = {}
    for p in wanted:
        prefer.setdefault(p.profile, []).append(p.start)
    best: tuple[Placement, ...] = ()
    best_key = (-1, -1)
    for size in range(len(wanted), 0, -1):
        seen: set[tuple[str, ...]] = set()
        for combo in itertools.combinations(wanted, size):
            names = tuple(sorted(p.profile for p in combo))
            key = (sum(known[n].slice_count for n in names), size)
            if names in seen or key <= best_key:
                continue
            seen.add(names)
            if count_problems(model, fixed_counts + Counter(names)):
                continue
            found = search_placements(spec, names, occupied=occupied, prefer=prefer)
            if found is not None:
                best, best_key = found, key
    left = Counter(p.profile for p in wanted) - Counter(p.profile for p in best)
    left_out: list[Placement] = []
    for p in wanted:
        if left[p.profile] > 0:
            left[p.profile] -= 1
            left_out.append(p)
    return best, tuple(left_out)


def plan_gpu(
    model: MigModel,
    state: GpuMigState,
    desired: MigLayout,
    in_use: Collection[int | str] = (),
    *,
    allow_partial: bool = False,
) -> MigPlan:
    """The plan taking ``state`` to ``desired`` (an explicit layout; see ``place_counts`` for counts-only ones).

    Raises :class:`InvalidLayoutError` when ``desired`` cannot exist on ``model``."""
    validate_layout(model, desired)
    busy = state.in_use(in_use)
    gpu_busy = bool(state.uuid) and state.uuid in in_use and not state.mig_enabled
    current = state.layout
    if current == desired:
        return MigPlan(state.index, PlanStatus.NOOP, current, desired, current)
    if not desired.mig_enabled:
        if busy:
            return _blocked(state, desired, busy, False)
        return MigPlan(state.index, PlanStatus.APPLY, current, desired, desired, _steps(state, desired))
    if gpu_busy:
        return _blocked(state, desired, (), True)
    wanted = set(desired.instances)
    blocking = [i for i in busy if i.placement not in wanted] if state.mig_enabled else []
    if not blocking:
        return MigPlan(state.index, PlanStatus.APPLY, current, desired, desired, _steps(state, desired))
    if not allow_partial:
        return _blocked(state, desired, blocking, False)
    fixed = [i.placement for i in state.instances if i.placement in wanted or i in busy]
    missing = [p for p in desired.instances if p not in set(fixed)]
    placed, left_out = _fit_around(model, fixed, missing)
    target = MigLayout(True, (*fixed, *placed))
    steps = _steps(state, target)
    if not steps:
        return _blocked(state, desired, blocking, False)
    return MigPlan(
        state.index,
        PlanStatus.PARTIAL,
        current,
        desired,
        target,
        steps,
        blocked_by=tuple(blocking),
        not_applied=left_out,
    )


def simulate(model: MigModel, state: GpuMigState, steps: Sequence[Step]) -> GpuMigState:
    """Apply ``steps`` to an in-memory copy of the GPU the way the hardware would (new GI ids take the lowest
    free id from 1), raising :class:`InvalidLayoutError` on an overlap, a missing instance or a MIG mode
    change with instances present. For dry runs, tests and benchmarks."""
    spec = mig_spec(model)
    known = {p.name: p for p in spec.profiles}
    enabled = state.mig_enabled
    instances = {i.gi_id: i for i in state.instances}
    for step in steps:
        if isinstance(step, DestroyMigDevice):
            if instances.pop(step.gi_id, None) is None:
                raise InvalidLayoutError([f"GPU {state.index}: no GPU instance {step.gi_id} to destroy"])
        elif isinstance(step, SetMigMode):
            if instances:
                raise InvalidLayoutError([f"GPU {state.index}: MIG mode change with instances present"])
            enabled = step.enabled
        elif isinstance(step, CreateMigDevice):
            profile = known[step.profile]
            if not enabled or step.start not in profile.starts:
                raise InvalidLayoutError([f"GPU {state.index}: cannot create {step.profile}@{step.start}"])
            bits = span(profile, step.start)
            for other in instances.values():
                if bits & span(known[other.profile], other.start):
                    raise InvalidLayoutError(
                        [f"GPU {state.index}: {step.profile}@{step.start} overlaps {other}"]
                    )
            gi_id = next(n for n in itertools.count(1) if n not in instances)
            instances[gi_id] = MigInstance(step.profile, step.start, gi_id, f"MIG-sim-{state.index}-{gi_id}")
    ordered = tuple(sorted(instances.values(), key=lambda i: (i.start, i.profile)))
    return GpuMigState(state.model_id, state.index, enabled, ordered, state.uuid)
