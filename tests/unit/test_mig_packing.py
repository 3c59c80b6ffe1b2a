"""Packing pending MIG demand onto idle GPU capacity, never touching instances in use."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra.hardware.gpus.catalog import GpuModel, load_catalog
from gpudra.mig.layout import GpuMigState, MigInstance, MigLayout
from gpudra.mig.packing import PackingGpu, optimal_packing, plan_packing
from gpudra.mig.plan import DestroyMigDevice, PlanStatus
from gpudra.mig.space import placement_space

CATALOG = load_catalog()
H100 = CATALOG.model("H100-SXM5-80GB")
A100_80 = CATALOG.model("A100-SXM4-80GB")


def _gpu(index: int, layout: MigLayout, in_use: set[int] | None = None, model: GpuModel = H100) -> PackingGpu:
    instances = tuple(
        MigInstance(p.profile, p.start, gi, f"MIG-{index}-{gi}") for gi, p in enumerate(layout.instances, 1)
    )
    return PackingGpu(
        model,
        GpuMigState(model.model_id, index, layout.mig_enabled, instances, f"GPU-{index}"),
        frozenset(in_use or ()),
    )


def test_seven_1g_claims_fill_one_h100_and_the_eighth_does_not_fit() -> None:
    gpu = _gpu(0, MigLayout(False))
    seven = plan_packing([gpu], {"1g.10gb": 7})
    assert seven.served == {"1g.10gb": 7}
    assert seven.unserved == {}
    assert seven.gpus[0].layout.counts() == {"1g.10gb": 7}
    eight = plan_packing([gpu], {"1g.10gb": 8})
    assert eight.served == {"1g.10gb": 7}
    assert eight.unserved == {"1g.10gb": 1}


def test_existing_free_instances_are_used_without_change() -> None:
    gpu = _gpu(0, MigLayout.of(("3g.40gb", 0), ("3g.40gb", 4)), {1})
    packing = plan_packing([gpu], {"3g.40gb": 1})
    assert packing.served == {"3g.40gb": 1}
    assert packing.changes == 0
    assert packing.gpus[0].plan.steps == ()


def test_repartitions_idle_space_around_in_use_instances() -> None:
    gpu = _gpu(0, MigLayout.of(("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4)), {1})
    packing = plan_packing([gpu], {"1g.10gb": 5})  # 2g in use; the rest becomes 1g instances
    assert packing.served == {"1g.10gb": 5}
    layout = packing.gpus[0].layout
    assert ("2g.20gb", 0) in {(p.profile, p.start) for p in layout.instances}
    steps = packing.gpus[0].plan.steps
    assert not any(isinstance(s, DestroyMigDevice) and s.gi_id == 1 for s in steps)
    assert packing.gpus[0].plan.status is PlanStatus.APPLY


def test_large_profile_goes_to_the_empty_gpu() -> None:
    busy = _gpu(0, MigLayout.of(("1g.10gb", 0)), {1})
    empty = _gpu(1, MigLayout(True))
    packing = plan_packing([busy, empty], {"7g.80gb": 1, "3g.40gb": 1})
    assert packing.served == {"7g.80gb": 1, "3g.40gb": 1}
    assert packing.gpus[1].layout == MigLayout.of(("7g.80gb", 0))


def test_mixed_models_share_profile_names() -> None:
    gpus = [_gpu(0, MigLayout(True)), _gpu(1, MigLayout(True), model=A100_80)]
    packing = plan_packing(gpus, {"4g.40gb": 2, "3g.40gb": 2})
    assert packing.served_slices == 14
    assert optimal_packing(gpus, {"4g.40gb": 2, "3g.40gb": 2}).served_slices == 14


PROFILES = ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[PackingGpu], dict[str, int]]:
    space = placement_space(H100)
    gpus = []
    for index in range(draw(st.integers(1, 3))):
        layout = space.layout_of(draw(st.sampled_from(space.layouts)))
        in_use = {gi for gi in range(1, len(layout.instances) + 1) if draw(st.booleans())}
        gpus.append(_gpu(index, layout, in_use))
    demand = {p: draw(st.integers(0, 3)) for p in PROFILES}
    return gpus, demand


@given(fleets())
@settings(max_examples=60, deadline=None)
def test_packing_never_touches_in_use_and_never_beats_the_optimum(
    fleet: tuple[list[PackingGpu], dict[str, int]],
) -> None:
    gpus, demand = fleet
    packing = plan_packing(gpus, demand)
    best = optimal_packing(gpus, demand)
    assert packing.served_slices <= best.served_slices
    for gpu, result in zip(gpus, (*packing.gpus, *best.gpus)[: len(gpus)], strict=True):
        busy = {i.placement for i in gpu.state.in_use(gpu.in_use)}
        assert busy <= set(result.layout.instances)
        assert result.plan.status in (PlanStatus.APPLY, PlanStatus.NOOP)
        assert result.plan.target == result.layout
    for result in best.gpus:
        assert result.plan.status in (PlanStatus.APPLY, PlanStatus.NOOP)
    for name, count in packing.served.items():
        assert count <= demand[name]
