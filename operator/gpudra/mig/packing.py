"""Packing MIG demand onto idle GPU capacity: gpudra's planner and an exhaustive optimum to compare it with.

Input: GPUs (model, current state, the instances in use) and pending demand (profile -> count). Output: per GPU
a desired layout that keeps every in-use instance where it is, the plan to reach it, and which demand it serves.

The planner (``plan_packing``):
1. Free instances that already match demand are reserved first: serving from them changes nothing.
2. The remaining demand goes GPU by GPU, fullest GPU first (best fit: leave empty GPUs empty for large
   profiles), MIG-enabled GPUs before disabled ones (a mode change needs a reset). On each GPU the layout is
   chosen among all valid layouts that keep the in-use and reserved instances: most demand served (in compute
   slices), then fewest instances created or destroyed, then most free placements left for later demand.

The optimum (``optimal_packing``) searches all GPUs jointly (branch and bound over each GPU's distinct served
vectors) for the most demand served in compute slices; ties go to fewer changes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from gpudra.hardware.gpus.catalog import MigModel
from gpudra.mig.layout import GpuMigState, MigLayout
from gpudra.mig.plan import MigPlan, plan_gpu, unchanged
from gpudra.mig.space import Candidate, PlacementSpace, placement_space


@dataclass(frozen=True)
class PackingGpu:
    """One GPU offered to the packer. A GPU with MIG disabled and its UUID in ``in_use`` is skipped."""

    model: MigModel
    state: GpuMigState
    in_use: frozenset[int | str] = frozenset()


@dataclass(frozen=True)
class GpuPacking:
    """What the packer chose for one GPU (same position as in the input)."""

    layout: MigLayout
    plan: MigPlan
    serves: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Packing:
    gpus: tuple[GpuPacking, ...]
    served: Mapping[str, int]
    unserved: Mapping[str, int]
    served_slices: int
    changes: int  # instances created or destroyed, plus MIG mode changes


@dataclass
class _Gpu:
    """Working view of one input GPU."""

    space: PlacementSpace | None
    gpu: PackingGpu
    current: int = 0  # placement bits of the current instances
    fixed: int = 0  # in use (never touched)


def _prepare(gpus: Sequence[PackingGpu]) -> list[_Gpu]:
    out: list[_Gpu] = []
    for g in gpus:
        busy_whole = bool(g.state.uuid) and g.state.uuid in g.in_use and not g.state.mig_enabled
        if g.model.mig is None or busy_whole:
            out.append(_Gpu(None, g))
            continue
        space = placement_space(g.model)
        current = space.bits_of(i.placement for i in g.state.instances) if g.state.mig_enabled else 0
        fixed = space.bits_of(i.placement for i in g.state.in_use(g.in_use)) if g.state.mig_enabled else 0
        out.append(_Gpu(space, g, current, fixed))
    return out


def _popcount(bits: int) -> int:
    return bin(bits).count("1")


def _changes(work: _Gpu, bits: int) -> int:
    mode = 0 if work.gpu.state.mig_enabled else 1
    return _popcount(work.current & ~bits) + _popcount(bits & ~work.current) + mode


def _demand_vector(space: PlacementSpace, demand: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(max(0, demand.get(p.name, 0)) for p in space.profiles)


def _served(space: PlacementSpace, extra: Sequence[int], want: Sequence[int]) -> tuple[int, ...]:
    return tuple(min(e, w) for e, w in zip(extra, want, strict=True))


def _slices(space: PlacementSpace, served: Sequence[int]) -> int:
    return sum(p.slice_count * n for p, n in zip(space.profiles, served, strict=True))


def _reserve(work: _Gpu, demand: Counter[str]) -> int:
    """Reserve free instances matching demand; returns the bits reserved."""
    assert work.space is not None
    reserved = 0
    free = work.current & ~work.fixed
    for i, placement in enumerate(work.space.placements):
        if free >> i & 1 and demand[placement.profile] > 0:
            demand[placement.profile] -= 1
            reserved |= 1 << i
    return reserved


def _best_layout(work: _Gpu, keep: int, demand: Counter[str]) -> Candidate:
    """The layout keeping ``keep`` that serves the most of ``demand`` with the fewest changes."""
    assert work.space is not None
    space = work.space
    want = _demand_vector(space, demand)
    best: Candidate | None = None
    best_key: tuple[int, int, int] = (-1, 0, 0)
    for cand in space.containing(keep):
        value = _slices(space, _served(space, cand.extra, want))
        if value < best_key[0]:
            continue
        key = (value, -_changes(work, cand.bits), 0)
        if key[:2] < best_key[:2]:
            continue
        key = (key[0], key[1], space.flexibility(cand.memory))
        if key > best_key:
            best, best_key = cand, key
    assert best is not None  # ``keep`` itself is a valid layout
    return best


def _result(works: Sequence[_Gpu], chosen: Sequence[int | None], demand: Mapping[str, int]) -> Packing:
    """Plans and served demand for the chosen layout bits (None: leave the GPU as it is)."""
    remaining = Counter({k: v for k, v in demand.items() if v > 0})
    served_total: Counter[str] = Counter()
    out: list[GpuPacking] = []
    changes = slices = 0
    for work, bits in zip(works, chosen, strict=True):
        state = work.gpu.state
        if work.space is None or bits is None:
            out.append(GpuPacking(state.layout, unchanged(state)))
            continue
        layout = work.space.layout_of(bits)
        if bits == work.current and not state.mig_enabled:
            layout = state.layout
        serves: Counter[str] = Counter()
        for i, placement in enumerate(work.space.placements):
            if bits >> i & 1 and not work.fixed >> i & 1 and remaining[placement.profile] > 0:
                remaining[placement.profile] -= 1
                serves[placement.profile] += 1
                slices += work.space.profiles[work.space.profile_index[placement.profile]].slice_count
        served_total.update(serves)
        plan = plan_gpu(work.gpu.model, state, layout, work.gpu.in_use)
        changes += _changes(work, bits) if layout != state.layout else 0
        out.append(GpuPacking(layout, plan, dict(serves)))
    return Packing(tuple(out), dict(served_total), dict(+remaining), slices, changes)


def plan_packing(gpus: Sequence[PackingGpu], demand: Mapping[str, int]) -> Packing:
    """gpudra's planner (see the module docstring)."""
    works = _prepare(gpus)
    remaining = Counter({k: v for k, v in demand.items() if v > 0})
    keep = [w.fixed | _reserve(w, remaining) if w.space else 0 for w in works]
    chosen: list[int | None] = [None] * len(works)

    def order(i: int) -> tuple[int, int, int]:
        w = works[i]
        assert w.space is not None
        free = w.space.spec.memory_slices - _popcount(w.space.memory_of(keep[i]))
        return (0 if w.gpu.state.mig_enabled else 1, free, i)

    for i in sorted((i for i, w in enumerate(works) if w.space), key=order):
        work = works[i]
        if +remaining:
            cand = _best_layout(work, keep[i], remaining)
            assert work.space is not None
            served = _served(work.space, cand.extra, _demand_vector(work.space, remaining))
            for profile, n in zip(work.space.profiles, served, strict=True):
                remaining[profile.name] -= n
            chosen[i] = cand.bits if _slices(work.space, served) else None
        if chosen[i] is None and keep[i] != work.fixed:
            chosen[i] = work.current  # serving from reserved instances only: no change
    return _result(works, chosen, demand)


def optimal_packing(
    gpus: Sequence[PackingGpu], demand: Mapping[str, int], *, node_limit: int = 200_000
) -> Packing:
    """The most demand (in compute slices) any repartition of the free capacity can serve, found by branch
    and bound over the GPUs; ``node_limit`` caps the search (the best found so far is returned)."""
    works = _prepare(gpus)
    names = sorted({k for k, v in demand.items() if v > 0})
    total = [demand[n] for n in names]
    weights = _profile_slices(works)
    weight = [weights.get(n, 0) for n in names]

    def value_of(vec: Sequence[int]) -> int:
        return sum(w * c for w, c in zip(weight, vec, strict=True))

    options: list[list[tuple[tuple[int, ...], int, int]]] = []  # per GPU: (served over names, slices, bits)
    for work in works:
        opts: dict[tuple[int, ...], tuple[int, int]] = {}
        if work.space is not None:
            space = work.space
            for cand in space.containing(work.fixed):
                vec = tuple(
                    min(cand.extra[space.profile_index[n]] if n in space.profile_index else 0, t)
                    for n, t in zip(names, total, strict=True)
                )
                cost = _changes(work, cand.bits)
                if vec not in opts or cost < opts[vec][1]:
                    opts[vec] = (cand.bits, cost)
        pareto = _pareto(opts)
        options.append(
            sorted(
                ((v, value_of(v), bits) for v, bits in pareto),
                key=lambda o: -o[1],
            )
        )
    order = sorted(range(len(works)), key=lambda i: -(options[i][0][1] if options[i] else 0))
    caps = [max((o[1] for o in options[i]), default=0) for i in order]
    suffix = [sum(caps[k:]) for k in range(len(order) + 1)]
    want_slices = value_of(total)
    best_value = -1
    best_pick: list[tuple[int, ...] | None] = [None] * len(works)
    pick: list[tuple[int, ...] | None] = [None] * len(works)
    nodes = 0

    def search(k: int, left: list[int], value: int) -> None:
        nonlocal best_value, best_pick, nodes
        nodes += 1
        if value > best_value:
            best_value, best_pick = value, list(pick)
        if k == len(order) or nodes > node_limit or best_value >= want_slices:
            return
        if value + min(suffix[k], want_slices - value) <= best_value:
            return
        i = order[k]
        tried: set[tuple[int, ...]] = set()
        for vec, _, _ in options[i]:
            take = tuple(min(v, m) for v, m in zip(vec, left, strict=True))  # a layout may serve less
            if take in tried or not any(take):
                continue
            tried.add(take)
            pick[i] = take
            search(k + 1, [m - v for v, m in zip(take, left, strict=True)], value + value_of(take))
            pick[i] = None
        search(k + 1, left, value)

    search(0, list(total), 0)
    chosen = [
        None if take is None else _cheapest(w, names, take) for w, take in zip(works, best_pick, strict=True)
    ]
    return _result(works, chosen, demand)


def _cheapest(work: _Gpu, names: Sequence[str], take: Sequence[int]) -> int:
    """The layout serving at least ``take`` with the fewest changes (then the most free placements)."""
    assert work.space is not None
    space = work.space
    need = [(space.profile_index[n], t) for n, t in zip(names, take, strict=True) if t]
    best, best_key = work.current, (1 << 30, 0)
    for cand in space.containing(work.fixed):
        if any(cand.extra[k] < t for k, t in need):
            continue
        key = (_changes(work, cand.bits), -space.flexibility(cand.memory))
        if key < best_key:
            best, best_key = cand.bits, key
    return best


def _pareto(opts: Mapping[tuple[int, ...], tuple[int, int]]) -> list[tuple[tuple[int, ...], int]]:
    vecs = sorted(opts, key=lambda v: -sum(v))
    kept: list[tuple[int, ...]] = []
    for v in vecs:
        if not any(all(a >= b for a, b in zip(k, v, strict=True)) for k in kept):
            kept.append(v)
    return [(v, opts[v][0]) for v in kept]


def _profile_slices(works: Sequence[_Gpu]) -> dict[str, int]:
    out: dict[str, int] = {}
    for w in works:
        if w.space is not None:
            for p in w.space.profiles:
                out.setdefault(p.name, p.slice_count)
    return out


def free_instances(state: GpuMigState, in_use: Collection[int | str]) -> Counter[str]:
    """Profiles of the instances not in use (what can serve a claim right now)."""
    busy = set(state.in_use(in_use))
    return Counter(i.profile for i in state.instances if i not in busy)
