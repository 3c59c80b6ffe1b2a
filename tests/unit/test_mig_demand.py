"""The controller's MIG planner (pure): pending MIG demand on fleets with instances in use -> the smallest
repartition of idle GPUs that satisfies it, never touching what is in use; what cannot be satisfied says why."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra.hardware.gpus.catalog import GpuModel, load_catalog
from gpudra.mig.demand import (
    DemandGpu,
    DemandPlan,
    MigDemand,
    MigRequest,
    ProfileChoice,
    applied_layout,
    plan_demand,
)
from gpudra.mig.keep import place_counts_keeping
from gpudra.mig.layout import GpuMigState, MigInstance, MigLayout
from gpudra.mig.plan import DestroyMigDevice, simulate
from gpudra.mig.space import placement_space
from gpudra.mig.validate import place_counts, validate_layout

CATALOG = load_catalog()
H100 = CATALOG.model("H100-SXM5-80GB")
A100_40 = CATALOG.model("A100-SXM4-40GB")
A100_80 = CATALOG.model("A100-SXM4-80GB")
A30 = CATALOG.model("A30")


def balanced(model: GpuModel) -> MigLayout:
    assert model.mig is not None
    return place_counts(model, model.mig.all_balanced)


def gpu(
    model: GpuModel, index: int, layout: MigLayout, busy: tuple[str, ...] = (), node: str = "n"
) -> DemandGpu:
    """A GPU with ``layout``; ``busy`` names in-use instances as "profile@start" (or "gpu": the whole GPU)."""
    instances = tuple(
        MigInstance(p.profile, p.start, gi, f"MIG-{node}-{index}-{gi}")
        for gi, p in enumerate(layout.instances, 1)
    )
    uuid = f"GPU-{node}-{index}"
    in_use = {i.uuid for i in instances if f"{i.profile}@{i.start}" in busy} | (
        {uuid} if "gpu" in busy else set()
    )
    state = GpuMigState(model.model_id, index, layout.mig_enabled, instances, uuid)
    return DemandGpu(model, state, frozenset(in_use), node=node)


def claim(name: str, model: GpuModel, *wants: tuple[str, int]) -> MigDemand:
    requests = tuple(
        MigRequest(f"r{i}", count, (ProfileChoice(profile, frozenset({model.model_id})),))
        for i, (profile, count) in enumerate(wants)
    )
    return MigDemand(f"default/{name}", requests)


def steps_text(plan: DemandPlan, name: str) -> list[str]:
    return [str(g) for g in plan.gpus_for(f"default/{name}")]


# ------------------------------------------------------------------ H100


def test_h100_an_idle_7g_becomes_three_2g_rather_than_touching_two_gpus() -> None:
    fleet = [gpu(H100, 0, balanced(H100), ("3g.40gb@4",)), gpu(H100, 1, MigLayout.of(("7g.80gb", 0)))]
    plan = plan_demand(fleet, [claim("c", H100, ("2g.20gb", 3))])
    assert steps_text(plan, "c") == ["GPU 1 on node n: destroy 7g.80gb, create 3x 2g.20gb"]
    assert plan.needs == {"default/c": {"2g.20gb": 3}}


def test_h100_free_instance_serves_without_any_change() -> None:
    plan = plan_demand([gpu(H100, 0, balanced(H100))], [claim("c", H100, ("3g.40gb", 1))])
    assert plan.placed == {"default/c": "n"}
    assert plan.gpus_for("default/c") == () and plan.reason_for("default/c") is None


def test_h100_everything_in_use_is_explained() -> None:
    busy = ("2g.20gb@0", "1g.10gb@2", "1g.10gb@3", "3g.40gb@4")
    plan = plan_demand([gpu(H100, 0, balanced(H100), busy)], [claim("c", H100, ("1g.10gb", 1))])
    assert plan.placed == {}
    reason = plan.reason_for("default/c")
    assert reason is not None and "needs 1x 1g.10gb" in reason and "around the instances in use" in reason


def test_h100_mig_disabled_idle_gpu_is_enabled() -> None:
    plan = plan_demand([gpu(H100, 0, MigLayout(False))], [claim("c", H100, ("1g.10gb", 2))])
    assert steps_text(plan, "c") == ["GPU 0 on node n: enable MIG (GPU reset), create 2x 1g.10gb"]


def test_h100_whole_gpu_in_use_is_never_planned() -> None:
    plan = plan_demand([gpu(H100, 0, MigLayout(False), ("gpu",))], [claim("c", H100, ("1g.10gb", 1))])
    assert plan.placed == {} and plan.reason_for("default/c") is not None


def test_h100_a_gpu_on_a_node_the_claims_pod_may_not_go_to_is_left_alone() -> None:
    fleet = [gpu(H100, 0, MigLayout(False), node="a"), gpu(H100, 0, balanced(H100), ("3g.40gb@4",), node="b")]
    wanted = claim("c", H100, ("2g.20gb", 2))
    assert plan_demand(fleet, [wanted]).placed == {"default/c": "a"}  # an idle GPU beats a busy one

    kept = replace(wanted, kept_off=frozenset({"a"}))  # tainted, say
    plan = plan_demand(fleet, [kept])
    assert plan.placed == {"default/c": "b"}
    assert steps_text(plan, "c") == ["GPU 0 on node b: destroy 2x 1g.10gb, create 2g.20gb"]

    nowhere = plan_demand(fleet, [replace(wanted, kept_off=frozenset({"a", "b"}))])
    assert nowhere.placed == {} and nowhere.nodes == ()
    assert nowhere.reason_for("default/c") == (
        "no node its pod may go to has GPUs of one model offering a matching profile for every request"
    )
    busy = ("2g.20gb@0", "1g.10gb@2", "1g.10gb@3", "3g.40gb@4")
    crowded = [gpu(H100, 0, MigLayout(False), node="a"), gpu(H100, 0, balanced(H100), busy, node="b")]
    reason = plan_demand(crowded, [kept]).reason_for("default/c")
    assert reason == (
        "needs 2x 2g.20gb; the idle capacity of the 1 matching GPU(s) on 1 node(s) its pod may go to cannot fit it"
        " around the instances in use and the other pending claims"
    )


# ------------------------------------------------------------------ A100-40GB


def test_a100_40gb_3g_in_use_everywhere_repartitions_one_gpu() -> None:
    fleet = [gpu(A100_40, i, balanced(A100_40), ("3g.20gb@4",)) for i in range(8)]
    plan = plan_demand(fleet, [claim("c", A100_40, ("3g.20gb", 1))])
    assert steps_text(plan, "c") == ["GPU 0 on node n: destroy 2x 1g.5gb, 2g.10gb, create 3g.20gb"]
    (only,) = plan.gpus_for("default/c")
    assert only.layout == MigLayout.of(("3g.20gb", 0), ("3g.20gb", 4))


def test_a100_40gb_4g_skips_the_gpu_whose_in_use_1g_sits_at_its_only_placement() -> None:
    fleet = [
        gpu(A100_40, 0, balanced(A100_40), ("3g.20gb@4", "1g.5gb@2")),
        gpu(A100_40, 1, balanced(A100_40), ("3g.20gb@4",)),
    ]
    plan = plan_demand(fleet, [claim("c", A100_40, ("4g.20gb", 1))])
    assert steps_text(plan, "c") == ["GPU 1 on node n: destroy 2x 1g.5gb, 2g.10gb, create 4g.20gb"]


# ------------------------------------------------------------------ A100-80GB


def test_a100_80gb_picks_the_node_that_has_room() -> None:
    fleet = [
        gpu(A100_80, 0, MigLayout.of(("7g.80gb", 0)), ("7g.80gb@0",), node="a"),
        gpu(A100_80, 0, balanced(A100_80), node="b"),
    ]
    plan = plan_demand(fleet, [claim("c", A100_80, ("7g.80gb", 1))])
    assert steps_text(plan, "c") == ["GPU 0 on node b: destroy 2x 1g.10gb, 2g.20gb, 3g.40gb, create 7g.80gb"]


def test_a100_80gb_older_claims_come_first_and_the_rest_is_explained() -> None:
    fleet = [gpu(A100_80, 0, MigLayout.of(("3g.40gb", 4)), ("3g.40gb@4",))]
    plan = plan_demand(fleet, [claim("old", A100_80, ("4g.40gb", 1)), claim("new", A100_80, ("4g.40gb", 1))])
    assert steps_text(plan, "old") == ["GPU 0 on node n: create 4g.40gb"]
    assert plan.placed == {"default/old": "n"}
    assert plan.reason_for("default/new") is not None


def test_a100_80gb_claim_with_two_requests_lands_whole_on_one_node() -> None:
    fleet = [
        gpu(A100_80, 0, MigLayout.of(("3g.40gb", 4)), ("3g.40gb@4",), node="a"),
        gpu(A100_80, 0, MigLayout(False), node="b"),
    ]
    plan = plan_demand(fleet, [claim("c", A100_80, ("4g.40gb", 1), ("3g.40gb", 1))])
    assert plan.placed == {"default/c": "b"}
    assert steps_text(plan, "c") == ["GPU 0 on node b: enable MIG (GPU reset), create 3g.40gb, 4g.40gb"]


# ------------------------------------------------------------------ A30


def test_a30_two_free_1g_become_a_2g_beside_the_in_use_2g() -> None:
    plan = plan_demand([gpu(A30, 0, balanced(A30), ("2g.12gb@0",))], [claim("c", A30, ("2g.12gb", 1))])
    (only,) = plan.gpus_for("default/c")
    assert only.layout == MigLayout.of(("2g.12gb", 0), ("2g.12gb", 2))
    assert only.describe() == "destroy 2x 1g.6gb, create 2g.12gb"


def test_a30_4g_needs_the_whole_gpu() -> None:
    fleet = [gpu(A30, 0, balanced(A30), ("1g.6gb@3",)), gpu(A30, 1, balanced(A30))]
    plan = plan_demand(fleet, [claim("c", A30, ("4g.24gb", 1))])
    assert steps_text(plan, "c") == ["GPU 1 on node n: destroy 2x 1g.6gb, 2g.12gb, create 4g.24gb"]


def test_profile_no_gpu_of_the_fleet_has_is_explained() -> None:
    demand = MigDemand("default/c", (MigRequest("r0", 1, ()),))
    plan = plan_demand([gpu(A30, 0, balanced(A30))], [demand])
    assert plan.reason_for("default/c") == (
        "request r0: no GPU model in the fleet has a MIG profile that matches it"
    )


def test_counts_are_placed_around_in_use_instances() -> None:
    state = gpu(H100, 0, MigLayout.of(("1g.10gb", 6), ("2g.20gb", 0)), ("1g.10gb@6",)).state
    layout = place_counts_keeping(H100, state, {"3g.40gb": 1, "1g.10gb": 1}, {"MIG-n-0-2"})
    assert layout == MigLayout.of(("3g.40gb", 0), ("1g.10gb", 6))


# ------------------------------------------------------------------ properties

MODELS = [H100, A100_40, A100_80, A30]


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[DemandGpu], list[MigDemand]]:
    model = draw(st.sampled_from(MODELS))
    assert model.mig is not None
    space = placement_space(model)
    gpus: list[DemandGpu] = []
    for index in range(draw(st.integers(1, 3))):
        enabled = draw(st.booleans()) or index == 0
        layout = space.layout_of(draw(st.sampled_from(space.layouts))) if enabled else MigLayout(False)
        names = [f"{p.profile}@{p.start}" for p in layout.instances]
        busy = draw(st.lists(st.sampled_from(names), unique=True)) if names else []
        gpus.append(gpu(model, index, layout, tuple(busy), node=f"node-{draw(st.integers(0, 1))}"))
    profiles = [p.name for p in model.mig.profiles]
    demands = [
        claim(
            f"c{i}",
            model,
            *draw(st.lists(st.tuples(st.sampled_from(profiles), st.integers(1, 2)), min_size=1, max_size=2)),
        )
        for i in range(draw(st.integers(1, 4)))
    ]
    return gpus, demands


@settings(max_examples=150, deadline=None)
@given(fleets())
def test_suggestions_are_valid_and_never_touch_in_use_instances(
    case: tuple[list[DemandGpu], list[MigDemand]],
) -> None:
    gpus, demands = case
    plan = plan_demand(gpus, demands)
    by_key = {(g.node, g.state.index): g for g in gpus}
    for node in plan.nodes:
        for suggestion in node.gpus:
            source = by_key[(suggestion.node, suggestion.gpu_index)]
            validate_layout(source.model, suggestion.layout)
            busy = source.state.in_use(source.in_use)
            assert {i.placement for i in busy} <= set(suggestion.layout.instances)
            destroyed = {s.uuid for s in suggestion.steps if isinstance(s, DestroyMigDevice)}
            assert not destroyed & {i.uuid for i in busy}
            reached = simulate(source.model, source.state, suggestion.steps)
            assert reached.layout == suggestion.layout
            assert applied_layout(source, suggestion.layout.counts()) == suggestion.layout
    assert set(plan.placed) | {u.claim for u in plan.unsatisfied} == {d.claim for d in demands}
