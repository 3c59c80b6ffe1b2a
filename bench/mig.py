"""MIG packing benchmark: a random stream of MIG claims (arrivals and departures) over a fleet of H100 and
A100-80GB GPUs, served three ways in the same run on the same stream:

(a) static: every GPU keeps mig-parted's all-balanced layout; a claim waits for a free instance of its profile;
(b) planner: the controller's MIG planner (``gpudra.mig.demand.plan_demand``, what the controller suggests and,
    with GPUDRA_MIG_PLANNER=apply, applies) repartitions idle capacity for the pending claims at every event,
    on nodes of ``--gpus-per-node`` GPUs, each claim a MigDemand for its profile;
(c) optimal: the exhaustive optimal packer does the same at every event, over the whole fleet at once.

A claim waits at most ``--patience`` time units, then leaves unserved. Reported: the time-averaged fraction of
the fleet's compute slices used by running claims, and the planner's share of the optimum (goal >= 98%).

    python -m bench mig [--quick] [--seed N]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpudra.hardware.gpus.catalog import GpuModel, load_catalog
from gpudra.mig.demand import DemandGpu, MigDemand, MigRequest, ProfileChoice, plan_demand
from gpudra.mig.layout import GpuMigState, MigLayout
from gpudra.mig.packing import PackingGpu, optimal_packing
from gpudra.mig.plan import plan_gpu, simulate
from gpudra.mig.validate import place_counts

PROFILE_WEIGHTS = {"1g.10gb": 30, "1g.20gb": 10, "2g.20gb": 20, "3g.40gb": 20, "4g.40gb": 10, "7g.80gb": 10}
SLICES = {"1g.10gb": 1, "1g.20gb": 1, "2g.20gb": 2, "3g.40gb": 3, "4g.40gb": 4, "7g.80gb": 7}

Packer = Callable[["Fleet", Sequence["Claim"]], list[MigLayout | None]]  # per GPU: new layout or unchanged


@dataclass(frozen=True)
class Claim:
    ident: int
    profile: str
    arrival: float
    duration: float


@dataclass
class Fleet:
    models: list[GpuModel]
    states: list[GpuMigState]
    in_use: list[dict[int, int]] = field(default_factory=list)  # per GPU: gi_id -> claim id

    def packing_gpus(self) -> list[PackingGpu]:
        return [
            PackingGpu(m, s, frozenset(u))
            for m, s, u in zip(self.models, self.states, self.in_use, strict=True)
        ]

    def assign(self, claim: Claim) -> tuple[int, int] | None:
        for g, state in enumerate(self.states):
            for inst in state.instances:
                if inst.profile == claim.profile and inst.gi_id not in self.in_use[g]:
                    self.in_use[g][inst.gi_id] = claim.ident
                    return g, inst.gi_id
        return None

    def apply(self, layouts: Sequence[MigLayout | None]) -> None:
        for g, layout in enumerate(layouts):
            if layout is not None and layout != self.states[g].layout:
                plan = plan_gpu(self.models[g], self.states[g], layout, set(self.in_use[g]))
                self.states[g] = simulate(self.models[g], self.states[g], plan.steps)


def controller_planner(gpus_per_node: int) -> Packer:
    """The controller's planner over the fleet split into nodes, one MigDemand per pending claim."""

    def pack(fleet: Fleet, pending: Sequence[Claim]) -> list[MigLayout | None]:
        models = frozenset(m.model_id for m in fleet.models)
        gpus = [
            DemandGpu(gpu.model, gpu.state, gpu.in_use, node=f"node-{g // gpus_per_node}")
            for g, gpu in enumerate(fleet.packing_gpus())
        ]
        demands = [
            MigDemand(f"c{c.ident}", (MigRequest("mig", 1, (ProfileChoice(c.profile, models),)),))
            for c in pending
        ]
        plan = plan_demand(gpus, demands)
        layouts: list[MigLayout | None] = [None] * len(gpus)
        for node in plan.nodes:
            for suggestion in node.gpus:
                layouts[suggestion.gpu_index] = suggestion.layout
        return layouts

    return pack


def exhaustive_optimum(fleet: Fleet, pending: Sequence[Claim]) -> list[MigLayout | None]:
    packing = optimal_packing(fleet.packing_gpus(), Counter(c.profile for c in pending))
    return [r.layout if r.plan.steps else None for r in packing.gpus]


def _stream(rng: random.Random, count: int, rate: float, mean_duration: float) -> list[Claim]:
    names, weights = list(PROFILE_WEIGHTS), list(PROFILE_WEIGHTS.values())
    now, claims = 0.0, []
    for ident in range(count):
        now += rng.expovariate(rate)
        claims.append(Claim(ident, rng.choices(names, weights)[0], now, rng.expovariate(1 / mean_duration)))
    return claims


def _fleet(models: list[GpuModel], static: bool) -> Fleet:
    states = []
    for index, model in enumerate(models):
        state = GpuMigState(model.model_id, index, static)
        if static:
            assert model.mig is not None
            layout = place_counts(model, model.mig.all_balanced)
            state = simulate(model, state, plan_gpu(model, state, layout).steps)
        states.append(state)
    return Fleet(models, states, [{} for _ in models])


def run(
    models: list[GpuModel], claims: list[Claim], packer: Packer | None, patience: float
) -> tuple[float, float]:
    """Time-averaged used fraction of compute slices, and seconds spent packing."""
    fleet = _fleet(models, packer is None)
    total = sum(m.mig.compute_slices for m in models if m.mig)
    ends: list[tuple[float, int, int, int]] = []  # (end time, gpu, gi, slices)
    pending: list[Claim] = []
    used, area, now, spent = 0, 0.0, 0.0, 0.0
    arrivals = iter(claims)
    upcoming = next(arrivals, None)
    while upcoming is not None or ends:
        next_end = min(ends)[0] if ends else float("inf")
        t = upcoming.arrival if upcoming is not None and upcoming.arrival <= next_end else next_end
        area += used * (t - now)
        now = t
        if upcoming is not None and upcoming.arrival == t:
            pending.append(upcoming)
            upcoming = next(arrivals, None)
        else:
            ends.sort()
            _, g, gi, slices = ends.pop(0)
            del fleet.in_use[g][gi]
            used -= slices
        pending = [c for c in pending if now - c.arrival <= patience]
        if pending and packer is not None:
            start = time.perf_counter()
            layouts = packer(fleet, pending)
            spent += time.perf_counter() - start
            fleet.apply(layouts)
        still: list[Claim] = []
        for claim in pending:
            where = fleet.assign(claim)
            if where is None:
                still.append(claim)
                continue
            ends.append((now + claim.duration, where[0], where[1], SLICES[claim.profile]))
            used += SLICES[claim.profile]
        pending = still
    return area / (total * now) if now else 0.0, spent


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench mig", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short stream (CI)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--gpus", type=int, default=8, help="fleet size (half H100, half A100-80GB)")
    parser.add_argument("--gpus-per-node", type=int, default=4, help="GPUs per node for the planner")
    parser.add_argument("--load", type=float, default=1.0, help="offered load / fleet compute slices")
    parser.add_argument(
        "--patience", type=float, default=2.0, help="how long a claim waits, in mean durations"
    )
    args = parser.parse_args(argv)
    catalog = load_catalog()
    models = [catalog.model("H100-SXM5-80GB" if i % 2 == 0 else "A100-SXM4-80GB") for i in range(args.gpus)]
    count = 300 if args.quick else 2000
    mean_slices = sum(SLICES[p] * w for p, w in PROFILE_WEIGHTS.items()) / sum(PROFILE_WEIGHTS.values())
    mean_duration = 10.0
    rate = args.load * 7 * args.gpus / (mean_slices * mean_duration)
    claims = _stream(random.Random(args.seed), count, rate, mean_duration)
    patience = args.patience * mean_duration
    print(
        f"fleet: {args.gpus} GPUs ({args.gpus * 7} compute slices), {count} claims, offered load {args.load:.2f}"
    )
    static, _ = run(models, claims, None, patience)
    planner, planner_s = run(models, claims, controller_planner(args.gpus_per_node), patience)
    optimal, optimal_s = run(models, claims, exhaustive_optimum, patience)
    print(f"  (a) static all-balanced   {static:6.1%} of compute slices used")
    print(f"  (b) gpudra planner        {planner:6.1%}   packing time {planner_s:6.2f} s")
    print(f"  (c) optimal per step      {optimal:6.1%}   packing time {optimal_s:6.2f} s")
    share = planner / optimal if optimal else 1.0
    print(f"  planner / optimal = {share:.3f} (goal >= 0.98); planner / static = {planner / static:.2f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
