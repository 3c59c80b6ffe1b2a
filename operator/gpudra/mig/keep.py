"""Counts-only layouts placed on a GPU that already has instances: keep what can stay where it is.

mig-parted (and a MigLayout entry) gives a GPU only ``{profile: count}``. Placing those counts from scratch
(``place_counts``) may move instances that exist already, in use ones included. ``place_counts_keeping``
places them among all valid layouts of the model that keep the in-use instances at their placements, choosing
the one with the fewest instances destroyed or created (then the most free placements left, then the lowest
placements), so applying a counts-only layout to a GPU changes as little as possible and never needs an
in-use instance gone when some valid layout keeps it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from gpudra.hardware.gpus.catalog import MigModel
from gpudra.mig.layout import GpuMigState, InvalidLayoutError, MigLayout
from gpudra.mig.space import placement_space
from gpudra.mig.validate import count_problems


def place_counts_keeping(
    model: MigModel, state: GpuMigState, counts: Mapping[str, int], in_use: Collection[int | str] = ()
) -> MigLayout:
    """The explicit layout with exactly ``counts`` that keeps the in-use instances of ``state`` and changes
    the fewest instances; :class:`InvalidLayoutError` when the counts cannot exist on ``model`` or cannot be
    placed around the in-use instances."""
    wanted = {name: n for name, n in counts.items() if n}
    problems = count_problems(model, wanted)
    if problems:
        raise InvalidLayoutError(problems, model_id=model.model_id)
    space = placement_space(model)
    current = space.bits_of(i.placement for i in state.instances) if state.mig_enabled else 0
    busy = state.in_use(in_use) if state.mig_enabled else ()
    fixed = space.bits_of(i.placement for i in busy)
    target = tuple(wanted.get(p.name, 0) for p in space.profiles)
    best: tuple[tuple[int, int, int], int] | None = None
    for cand in space.containing(fixed):
        if space.counts_of(cand.bits) != target:
            continue
        changes = bin(cand.bits ^ current).count("1")
        key = (changes, -space.flexibility(cand.memory), cand.bits)
        if best is None or key < best[0]:
            best = (key, cand.bits)
    if best is None:
        kept = ", ".join(str(i) for i in busy)
        where = f"around the in-use instances {kept}" if kept else "without overlaps"
        raise InvalidLayoutError(
            [f"GPU {state.index}: {_describe(wanted)} cannot be placed {where}"], model_id=model.model_id
        )
    return space.layout_of(best[1])


def place_for_gpu(
    model: MigModel, state: GpuMigState, target: MigLayout, in_use: Collection[int | str] = ()
) -> MigLayout:
    """Where a counts-only target goes on this GPU, as the applier creates it and the planner predicts it: on a
    GPU with MIG on, the fewest-change placement of ``target``'s counts around what exists (a GPU that already
    has those counts in other placements is left as it is, as mig-parted would; in-use instances stay put);
    ``target`` itself when MIG is off on either side or when no such placement exists (the plan then says why)."""
    if not (state.mig_enabled and target.mig_enabled):
        return target
    try:
        return place_counts_keeping(model, state, target.counts(), in_use)
    except InvalidLayoutError:
        return target


def _describe(counts: Mapping[str, int]) -> str:
    return " + ".join(f"{n}x {name}" for name, n in sorted(counts.items())) or "no instances"
