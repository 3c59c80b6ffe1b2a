"""Plans from a current MIG layout to a desired one: ordered steps that reach exactly the desired layout, never
overlap on the way, and never destroy an instance in use."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra.hardware.gpus.catalog import GpuModel, load_catalog
from gpudra.mig.layout import GpuMigState, InvalidLayoutError, MigInstance, MigLayout, Placement
from gpudra.mig.plan import (
    CreateMigDevice,
    DestroyMigDevice,
    PlanStatus,
    ResetGpu,
    SetMigMode,
    Step,
    plan_gpu,
    simulate,
)
from gpudra.mig.space import placement_space

CATALOG = load_catalog()
H100 = CATALOG.model("H100-SXM5-80GB")
A100_40 = CATALOG.model("A100-SXM4-40GB")
A30 = CATALOG.model("A30")


@dataclass
class FakeGpu:
    """A minimal GPU: MIG mode and instances by GI id; refuses what the hardware refuses."""

    model: GpuModel
    enabled: bool
    instances: dict[int, Placement] = field(default_factory=dict)
    busy: set[int] = field(default_factory=set)

    def _slots(self, p: Placement) -> set[int]:
        assert self.model.mig is not None
        profile = self.model.mig.profile(p.profile)
        assert p.start in profile.starts, f"{p} is not a valid placement"
        return set(range(p.start, p.start + profile.placement_size))

    def apply(self, step: Step) -> None:
        if isinstance(step, DestroyMigDevice):
            assert step.gi_id not in self.busy, f"destroyed in-use GI {step.gi_id}"
            del self.instances[step.gi_id]
        elif isinstance(step, SetMigMode):
            assert not self.instances, "MIG mode changed with instances present"
            self.enabled = step.enabled
        elif isinstance(step, CreateMigDevice):
            assert self.enabled, "created an instance with MIG disabled"
            new = Placement(step.start, step.profile)
            taken = (
                set().union(*(self._slots(p) for p in self.instances.values())) if self.instances else set()
            )
            assert not self._slots(new) & taken, f"{new} overlaps"
            self.instances[max(self.instances, default=0) + 1] = new
        else:
            assert isinstance(step, ResetGpu)

    def layout(self) -> MigLayout:
        return MigLayout(self.enabled, tuple(self.instances.values()))


def _state(model: GpuModel, layout: MigLayout) -> GpuMigState:
    instances = tuple(
        MigInstance(p.profile, p.start, gi, f"MIG-{gi}") for gi, p in enumerate(layout.instances, start=1)
    )
    return GpuMigState(model.model_id, 0, layout.mig_enabled, instances, "GPU-0")


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[GpuModel, GpuMigState, MigLayout, set[int]]:
    model = draw(st.sampled_from([H100, A100_40, A30]))
    space = placement_space(model)
    current_on = draw(st.booleans())
    current = space.layout_of(draw(st.sampled_from(space.layouts))) if current_on else MigLayout(False)
    desired_on = draw(st.integers(0, 5)) > 0
    desired = space.layout_of(draw(st.sampled_from(space.layouts))) if desired_on else MigLayout(False)
    state = _state(model, current)
    in_use = {i.gi_id for i in state.instances if draw(st.booleans())}
    return model, state, desired, in_use


@given(scenarios(), st.booleans())
@settings(max_examples=400, deadline=None)
def test_plans_reach_the_target_safely(
    scenario: tuple[GpuModel, GpuMigState, MigLayout, set[int]], partial: bool
) -> None:
    model, state, desired, in_use = scenario
    plan = plan_gpu(model, state, desired, in_use, allow_partial=partial)
    busy = {i.gi_id for i in state.instances if i.gi_id in in_use}
    assert not any(isinstance(s, DestroyMigDevice) and s.gi_id in busy for s in plan.steps)
    gpu = FakeGpu(model, state.mig_enabled, {i.gi_id: i.placement for i in state.instances}, busy)
    for step in plan.steps:
        gpu.apply(step)
    assert gpu.layout() == plan.target
    assert simulate(model, state, plan.steps).layout == plan.target
    if plan.status in (PlanStatus.APPLY, PlanStatus.NOOP):
        assert plan.target == desired
    elif plan.status is PlanStatus.BLOCKED:
        assert not plan.steps
        assert {i.gi_id for i in plan.blocked_by} <= busy
        assert plan.blocked_by or plan.gpu_in_use
    else:
        assert partial
        kept = {i.placement for i in state.instances if i.gi_id in busy}
        assert kept <= set(plan.target.instances)
        assert plan.target != desired
    if busy and state.mig_enabled:
        assert {i.placement for i in state.instances if i.gi_id in busy} <= set(plan.target.instances) or (
            plan.status is PlanStatus.BLOCKED
        )


def test_steps_are_ordered_destroy_mode_create() -> None:
    state = _state(H100, MigLayout.of(("3g.40gb", 0), ("3g.40gb", 4)))
    plan = plan_gpu(H100, state, MigLayout.of(("4g.40gb", 0), ("3g.40gb", 4)))
    assert plan.status is PlanStatus.APPLY
    assert plan.steps == (DestroyMigDevice(0, 1, "3g.40gb", 0, "MIG-1"), CreateMigDevice(0, "4g.40gb", 0))


def test_enabling_mig_needs_mode_change_and_reset_before_creations() -> None:
    state = GpuMigState(H100.model_id, 2, False, (), "GPU-2")
    plan = plan_gpu(H100, state, MigLayout.of(("7g.80gb", 0)))
    assert plan.steps == (SetMigMode(2, True), ResetGpu(2), CreateMigDevice(2, "7g.80gb", 0))
    back = plan_gpu(H100, simulate(H100, state, plan.steps), MigLayout(False))
    assert [type(s) for s in back.steps] == [DestroyMigDevice, SetMigMode, ResetGpu]


def test_in_use_instance_blocks_and_is_named() -> None:
    state = _state(H100, MigLayout.of(("1g.10gb", 0), ("1g.10gb", 1), ("3g.40gb", 4)))
    plan = plan_gpu(H100, state, MigLayout.of(("4g.40gb", 0), ("3g.40gb", 4)), {"MIG-2"})
    assert plan.status is PlanStatus.BLOCKED
    assert plan.steps == ()
    assert [i.uuid for i in plan.blocked_by] == ["MIG-2"]
    assert "1g.10gb@1 (GI 2, MIG-2)" in plan.message


def test_whole_gpu_in_use_blocks_enabling_mig() -> None:
    state = GpuMigState(H100.model_id, 0, False, (), "GPU-0")
    plan = plan_gpu(H100, state, MigLayout.of(("7g.80gb", 0)), {"GPU-0"})
    assert plan.status is PlanStatus.BLOCKED
    assert plan.gpu_in_use


def test_partial_keeps_in_use_and_fits_the_rest_around() -> None:
    # in use: a 1g at slice 5; desired all-balanced puts 3g.40gb at 4, which cannot coexist with it. The most
    # compute that still fits moves the 3g to slice 0 and leaves the 2g out.
    state = _state(H100, MigLayout.of(("1g.10gb", 5)))
    desired = MigLayout.of(("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4))
    plan = plan_gpu(H100, state, desired, {1}, allow_partial=True)
    assert plan.status is PlanStatus.PARTIAL
    assert Placement(5, "1g.10gb") in plan.target.instances
    assert [str(p) for p in plan.not_applied] == ["2g.20gb@0"]
    assert plan.target.counts() == {"3g.40gb": 1, "1g.10gb": 3}
    assert "not applied: 2g.20gb@0" in plan.message
    assert not any(isinstance(s, DestroyMigDevice) for s in plan.steps)


def test_partial_moves_a_desired_instance_when_its_start_is_taken() -> None:
    state = _state(H100, MigLayout.of(("1g.10gb", 0)))
    plan = plan_gpu(H100, state, MigLayout.of(("3g.40gb", 0)), {1}, allow_partial=True)
    assert plan.status is PlanStatus.PARTIAL
    assert plan.target == MigLayout.of(("1g.10gb", 0), ("3g.40gb", 4))
    assert plan.not_applied == ()


def test_invalid_desired_layout_raises() -> None:
    state = _state(H100, MigLayout(True))
    with pytest.raises(InvalidLayoutError, match="overlaps"):
        plan_gpu(H100, state, MigLayout.of(("4g.40gb", 0), ("3g.40gb", 0)))


def test_already_there_is_a_noop() -> None:
    layout = MigLayout.of(("7g.80gb", 0))
    plan = plan_gpu(H100, _state(H100, layout), layout)
    assert plan.status is PlanStatus.NOOP
    assert plan.steps == ()
