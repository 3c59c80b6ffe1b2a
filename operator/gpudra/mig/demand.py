"""The controller's MIG planner: pending MIG claims -> per-node repartitions of idle GPUs that would satisfy them.

Input: the GPUs of the fleet (node, model, current MIG state, the instances in use: allocated devices count)
and the pending claims' MIG demand (per request: a count and the acceptable profiles, in preference order,
each with the GPU models it may come from). Output: per node, the GPUs to repartition (current and suggested
layout, the ordered steps, which claims each serves), and the claims that cannot be satisfied, with why.

Rules:
- In-use instances are never destroyed or moved (the packer keeps them fixed); a GPU used whole is skipped.
- A claim is placed whole on one node and one GPU model of it (a claim's devices come from one node).
- Minimal change: within a node, demand is served from free instances first, then on the fullest GPUs
  (``plan_packing``), unless one GPU alone serves as much while touching fewer GPUs or destroying fewer
  instances (an idle 7g.80gb becomes 3x 2g.20gb rather than two GPUs changing). Among nodes, the one
  serving the most pending demand goes first, ties to the fewest GPUs touched, then the fewest instances
  destroyed, then the fewest changes. Each changed GPU's suggested layout is the one its counts give when
  applied as a MigLayout entry (``applied_layout``), so what the Event says is what the applier does.
- Claims are taken in the order given (oldest first); a claim that does not fit whole is left out entirely.
- A claim is never placed on a node its pod may not go to (``MigDemand.kept_off``): a GPU repartitioned there would
  not serve it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace

from gpudra.mig.keep import place_for_gpu
from gpudra.mig.layout import MigLayout
from gpudra.mig.packing import GpuPacking, Packing, PackingGpu, plan_packing
from gpudra.mig.plan import CreateMigDevice, DestroyMigDevice, MigPlan, SetMigMode, Step, plan_gpu, unchanged
from gpudra.mig.validate import place_counts


@dataclass(frozen=True)
class DemandGpu(PackingGpu):
    """One GPU of the fleet and its node. ``in_use``: GI ids or MIG UUIDs allocated to claims (the GPU's own UUID
    when the whole GPU is allocated)."""

    node: str = ""


@dataclass(frozen=True)
class ProfileChoice:
    """A profile that satisfies a request, on the GPU models listed."""

    profile: str
    models: frozenset[str]


@dataclass(frozen=True)
class MigRequest:
    name: str
    count: int
    choices: tuple[ProfileChoice, ...]  # preference order (smallest first); empty: no MIG profile matches

    def profile_on(self, model_id: str) -> str | None:
        return next((c.profile for c in self.choices if model_id in c.models), None)


@dataclass(frozen=True)
class MigDemand:
    claim: str  # namespace/name
    requests: tuple[MigRequest, ...]
    kept_off: frozenset[str] = frozenset()
    """Nodes its pod may not go to (kube-scheduler's node filters): no GPU of theirs is repartitioned for it."""

    def profiles_on(self, model_id: str) -> Counter[str] | None:
        """The profiles the claim needs on GPUs of ``model_id``; None when some request cannot use that model."""
        need: Counter[str] = Counter()
        for request in self.requests:
            profile = request.profile_on(model_id)
            if profile is None:
                return None
            need[profile] += request.count
        return need


@dataclass(frozen=True)
class GpuSuggestion:
    """One GPU to repartition: its node and model, the plan taking it to the suggested layout, and the claims
    the new layout serves."""

    node: str
    model_id: str
    plan: MigPlan
    claims: tuple[str, ...] = ()

    @property
    def gpu_index(self) -> int:
        return self.plan.gpu_index

    @property
    def current(self) -> MigLayout:
        return self.plan.current

    @property
    def layout(self) -> MigLayout:
        return self.plan.target

    @property
    def steps(self) -> tuple[Step, ...]:
        return self.plan.steps

    @property
    def counts(self) -> dict[str, int]:
        return self.layout.counts()

    @property
    def destroyed(self) -> int:
        return sum(1 for s in self.steps if isinstance(s, DestroyMigDevice))

    def describe(self) -> str:
        """``destroy 7g.80gb, create 3x 2g.20gb`` (enabling MIG named when the mode changes)."""
        parts: list[str] = []
        gone = Counter(s.profile for s in self.steps if isinstance(s, DestroyMigDevice))
        if gone:
            parts.append("destroy " + _counted(gone))
        if any(isinstance(s, SetMigMode) and s.enabled for s in self.steps):
            parts.append("enable MIG (GPU reset)")
        made = Counter(s.profile for s in self.steps if isinstance(s, CreateMigDevice))
        if made:
            parts.append("create " + _counted(made))
        return ", ".join(parts)

    def __str__(self) -> str:
        return f"GPU {self.gpu_index} on node {self.node}: {self.describe()}"


@dataclass(frozen=True)
class NodeSuggestion:
    node: str
    gpus: tuple[GpuSuggestion, ...]  # only GPUs with steps
    claims: tuple[str, ...]  # every claim placed on this node (some may need no change)


@dataclass(frozen=True)
class Unsatisfied:
    claim: str
    reason: str


@dataclass(frozen=True)
class DemandPlan:
    nodes: tuple[NodeSuggestion, ...] = ()
    unsatisfied: tuple[Unsatisfied, ...] = ()
    placed: dict[str, str] = field(default_factory=dict)  # claim -> node
    needs: dict[str, dict[str, int]] = field(default_factory=dict)  # claim -> profiles it needs on that node

    def gpus_for(self, claim: str) -> tuple[GpuSuggestion, ...]:
        """The repartitions the claim waits for (empty when it is unplaced or fits without one)."""
        return tuple(g for n in self.nodes for g in n.gpus if claim in g.claims)

    def reason_for(self, claim: str) -> str | None:
        return next((u.reason for u in self.unsatisfied if u.claim == claim), None)


def _counted(counts: Counter[str]) -> str:
    return ", ".join(f"{n}x {p}" if n > 1 else p for p, n in sorted(counts.items()))


@dataclass
class _Group:
    """The GPUs of one model on one node: the unit a claim is placed on."""

    node: str
    model_id: str
    gpus: list[DemandGpu]


@dataclass
class _Trial:
    group: _Group
    claims: list[tuple[MigDemand, Counter[str]]]
    packing: Packing
    gpus: list[GpuSuggestion | None]

    def key(self) -> tuple[int, int, int, int, str, str]:
        changed = [g for g in self.gpus if g is not None]
        destroyed = sum(g.destroyed for g in changed)
        return (-self.packing.served_slices, len(changed), destroyed, self.packing.changes, self.group.node,
                self.group.model_id)  # fmt: skip


def _groups(gpus: Sequence[DemandGpu]) -> list[_Group]:
    by_key: dict[tuple[str, str], _Group] = {}
    for gpu in gpus:
        if gpu.model.mig is None:
            continue
        key = (gpu.node, gpu.model.model_id)
        by_key.setdefault(key, _Group(gpu.node, gpu.model.model_id, [])).gpus.append(gpu)
    for group in by_key.values():
        group.gpus.sort(key=lambda g: g.state.index)
    return [by_key[k] for k in sorted(by_key)]


def _cost(packing: Packing) -> tuple[int, int, int, int]:
    """(minus the demand served in compute slices, GPUs touched, instances destroyed, changes): smaller is
    better."""
    plans = [g.plan for g in packing.gpus if g.plan.steps]
    destroyed = sum(1 for p in plans for s in p.steps if isinstance(s, DestroyMigDevice))
    return (-packing.served_slices, len(plans), destroyed, packing.changes)


def _alone(packing: Packing, index: int, gpus: Sequence[DemandGpu]) -> Packing:
    """A one-GPU packing spread to the group's shape (the other GPUs unchanged)."""
    out = [GpuPacking(g.state.layout, unchanged(g.state)) for g in gpus]
    out[index] = packing.gpus[0]
    return Packing(tuple(out), packing.served, packing.unserved, packing.served_slices, packing.changes)


def _pack(group: _Group, demand: Counter[str]) -> Packing:
    """The packer over the group's GPUs, or, when one GPU alone serves as much with fewer GPUs touched or
    instances destroyed, that GPU alone."""
    gpus = group.gpus
    best = plan_packing(gpus, demand)
    if len(gpus) > 1 and _cost(best)[1] > 1:
        for i, gpu in enumerate(gpus):
            alone = _alone(plan_packing([gpu], demand), i, gpus)
            if _cost(alone) < _cost(best):
                best = alone
    return best


def _take(claims: Sequence[tuple[MigDemand, Counter[str]]], served: Counter[str]) -> list[int]:
    """Indexes of the claims (in order) whose whole need fits in ``served``."""
    left = Counter(served)
    taken: list[int] = []
    for i, (_, need) in enumerate(claims):
        if all(left[p] >= n for p, n in need.items()):
            left.subtract(need)
            taken.append(i)
    return taken


def applied_layout(gpu: DemandGpu, counts: dict[str, int]) -> MigLayout:
    """The layout a MigLayout entry of ``counts`` gives this GPU: what the agent's applier creates
    (:func:`place_for_gpu`: the fewest-change placement around what exists)."""
    return place_for_gpu(gpu.model, gpu.state, place_counts(gpu.model, counts), gpu.in_use)


def _suggestion(gpu: DemandGpu, layout: MigLayout, plan: MigPlan) -> GpuSuggestion | None:
    if not plan.steps:
        return None
    final = applied_layout(gpu, layout.counts())
    if final != layout:
        plan = plan_gpu(gpu.model, gpu.state, final, gpu.in_use)
    return GpuSuggestion(gpu.node, gpu.model.model_id, plan)


def _trial(group: _Group, claims: list[tuple[MigDemand, Counter[str]]]) -> _Trial | None:
    demand = sum((need for _, need in claims), Counter[str]())
    packing = _pack(group, demand)
    taken = [claims[i] for i in _take(claims, Counter(packing.served))]
    if not taken:
        return None
    exact = sum((need for _, need in taken), Counter[str]())
    if exact != demand:
        packing = _pack(group, exact)  # do not create instances for claims that will not be placed here
    gpus = [_suggestion(g, r.layout, r.plan) for g, r in zip(group.gpus, packing.gpus, strict=True)]
    return _Trial(group, taken, packing, gpus)


def _attribute(trial: _Trial) -> tuple[GpuSuggestion, ...]:
    """The changed GPUs of a trial, each with the claims (in order) its instances serve."""
    offered = [Counter(r.serves) for r in trial.packing.gpus]
    owners: list[list[str]] = [[] for _ in offered]
    for demand, need in trial.claims:
        for profile, count in need.items():
            for i, left in enumerate(offered):
                use = min(left[profile], count)
                if use:
                    left[profile] -= use
                    count -= use
                    if demand.claim not in owners[i]:
                        owners[i].append(demand.claim)
                if not count:
                    break
    return tuple(replace(g, claims=tuple(owners[i])) for i, g in enumerate(trial.gpus) if g is not None)


def _unsatisfied(demand: MigDemand, groups: Collection[_Group]) -> str:
    for request in demand.requests:
        if not request.choices:
            return f"request {request.name}: no GPU model in the fleet has a MIG profile that matches it"
    allowed = [g for g in groups if g.node not in demand.kept_off]
    models = {g.model_id for g in allowed if demand.profiles_on(g.model_id) is not None}
    its_pod = " its pod may go to" if len(allowed) < len(groups) else ""
    if not models:
        return f"no node{its_pod} has GPUs of one model offering a matching profile for every request"
    usable = [g for g in allowed if g.model_id in models]
    need = ", ".join(
        f"{n}x {p}" for p, n in sorted((demand.profiles_on(usable[0].model_id) or Counter()).items())
    )
    count = sum(len(g.gpus) for g in usable)
    return (
        f"needs {need}; the idle capacity of the {count} matching GPU(s) on {len({g.node for g in usable})} "
        f"node(s){its_pod} cannot fit it around the instances in use and the other pending claims"
    )


def plan_demand(gpus: Sequence[DemandGpu], demands: Sequence[MigDemand]) -> DemandPlan:
    """Per-node repartitions of idle GPUs for the pending MIG ``demands`` (see the module docstring)."""
    groups = _groups(gpus)
    free = list(groups)
    pending = [d for d in demands if d.requests]
    nodes: dict[str, list[GpuSuggestion]] = {}
    placed: dict[str, str] = {}
    needs: dict[str, dict[str, int]] = {}
    tried: dict[
        tuple[int, tuple[str, ...]], _Trial | None
    ] = {}  # a group's trial only changes with its claims
    while pending and free:
        trials: list[_Trial] = []
        for group in free:
            claims = [
                (d, need)
                for d in pending
                if group.node not in d.kept_off and (need := d.profiles_on(group.model_id)) is not None
            ]
            key = (id(group), tuple(d.claim for d, _ in claims))
            if key not in tried:
                tried[key] = _trial(group, claims) if claims else None
            if (trial := tried[key]) is not None:
                trials.append(trial)
        if not trials:
            break
        best = min(trials, key=_Trial.key)
        free.remove(best.group)
        nodes.setdefault(best.group.node, []).extend(_attribute(best))
        done = {d.claim for d, _ in best.claims}
        placed.update(dict.fromkeys(done, best.group.node))
        needs.update((d.claim, dict(need)) for d, need in best.claims)
        pending = [d for d in pending if d.claim not in done]
    suggestions = tuple(
        NodeSuggestion(
            node,
            tuple(sorted(nodes.get(node, ()), key=lambda g: g.gpu_index)),
            tuple(c for c, n in placed.items() if n == node),
        )
        for node in sorted(set(placed.values()))
    )
    unsatisfied = tuple(
        Unsatisfied(d.claim, _unsatisfied(d, groups)) for d in demands if d.claim not in placed
    )
    return DemandPlan(suggestions, unsatisfied, placed, needs)
