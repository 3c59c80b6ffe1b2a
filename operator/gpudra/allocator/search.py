"""The backtracking search: Kubernetes' first solution, found without its wasted work.

Kubernetes walks claim -> request -> device slot, trying the devices in pool/slice/device order, for the next
slot of a request only the devices after the previous one (combinations, never permutations; so a request's
devices are distinct, multi-allocatable ones included), and keeps the first complete solution. This search
finds the same solution but only walks devices that pass every check that does not depend on the attempt
(``RequestSpec.usable``), drops devices that cannot meet a constraint, stops a branch when too few candidates
remain, checks before each request that every later request still has enough free candidates, and gives up
with ``SearchLimit`` after ``budget`` steps. Claims for which the branches Kubernetes walks in vain matter (a
selector failing at runtime on some device, a constraint on an ``All`` request) go to
:class:`gpudra.allocator.kubeorder.KubeOrderSearch` instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from gpudra.allocator.constraints import Constraint, remove, try_add
from gpudra.allocator.counters import fits_capacity, fits_counters
from gpudra.allocator.pools import AttrValue, DeviceEntry, DeviceId, PoolKey, PoolView, members
from gpudra.allocator.requests import ClaimSpec, RequestSpec
from gpudra.allocator.snapshot import ClusterSnapshot


class BudgetExceeded(Exception):
    """Raised inside the search when it ran out of steps."""


@dataclass(slots=True)
class Pick:
    claim_index: int
    spec: RequestSpec
    entry: DeviceEntry
    demand: dict[str, Fraction] | None
    """Consumed capacity when the device is multi-allocatable (a share), else None."""


@dataclass(slots=True)
class ConstraintMiss:
    """A constraint rejected a device during the search (for explanations)."""

    claim_index: int
    constraint: Constraint
    spec: RequestSpec


class Search:
    def __init__(
        self,
        snapshot: ClusterSnapshot,
        claims: list[ClaimSpec],
        constraints: list[list[Constraint]],
        budget: int,
        views: Mapping[PoolKey, PoolView] | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.views = views or {}
        """The node's own view of its pools (their counters), where it differs from the snapshot's."""
        self.claims = claims
        self.constraints = constraints
        self.budget = budget
        self.steps = 0
        self.picks: list[Pick] = []
        self.chosen: dict[tuple[int, int], int] = {}
        self.misses: list[ConstraintMiss] = []
        self.rejected = {"counters": 0, "capacity": 0, "in use": 0}
        """Attempt-time rejections (devices taken by other requests), for explanations."""
        self._exclusive: dict[DeviceId, set[int]] = {}
        self._shares: dict[DeviceId, int] = {}
        self._counters: dict[tuple[str, str, str, str], Fraction] = {}
        self._capacity: dict[DeviceId, dict[str, Fraction]] = {}
        self._candidates: dict[int, list[DeviceEntry]] = {}

    # ------------------------------------------------------------ pre-pruning

    def prune(self) -> None:
        """Restrict candidates by the claims' constraints (a device lacking the attribute never fits; a
        matchAttribute value is kept only if every constrained request could be filled with it)."""
        for ci, claim in enumerate(self.claims):
            for c in self.constraints[ci]:
                groups = [[s for s in g if c.applies(s.base, s.full)] for g in claim.groups]
                for group in groups:
                    for spec in group:
                        cands = self._cands(spec)
                        self._candidates[id(spec)] = [e for e in cands if c.attribute in e.attributes]
                if c.distinct:
                    continue
                constrained = [
                    g for g, full in zip(groups, claim.groups, strict=True) if g and len(g) == len(full)
                ]
                values: set[AttrValue] = {
                    m
                    for g in groups
                    for s in g
                    for e in self._cands(s)
                    for m in members(e.attributes[c.attribute])
                }
                viable = {
                    v for v in values
                    if all(any(self._count(s, c.attribute, v) >= s.need for s in g) for g in constrained)
                }  # fmt: skip
                for group in groups:
                    for spec in group:
                        self._candidates[id(spec)] = [
                            e
                            for e in self._cands(spec)
                            if not viable.isdisjoint(members(e.attributes[c.attribute]))
                        ]
        for claim in self.claims:
            for group in claim.groups:
                for spec in group:
                    cands = self._cands(spec)
                    if not spec.all_mode and len(cands) < spec.need:
                        spec.impossible = True

    def _cands(self, spec: RequestSpec) -> list[DeviceEntry]:
        got = self._candidates.get(id(spec))
        return spec.usable if got is None else got

    def _count(self, spec: RequestSpec, attribute: str, value: AttrValue) -> int:
        return sum(
            1
            for e in self._cands(spec)
            if attribute in e.attributes and value in members(e.attributes[attribute])
        )

    # ------------------------------------------------------------ search

    def run(self) -> bool:
        """True when a full solution was found (then ``picks`` and ``chosen`` hold it)."""
        if len(self.claims) == 1 and not self.constraints[0]:
            groups = self.claims[0].groups
            if len(groups) == 1 and len(groups[0]) == 1 and not groups[0][0].all_mode:
                return self._first(groups[0][0])
        return self._claim(0)

    def _first(self, spec: RequestSpec) -> bool:
        """One request, no constraint: the first ``need`` candidates are the first solution unless one of them
        draws on counters or capacity (then the full search decides). Steps are counted as the search would."""
        if spec.impossible:
            return False
        cands = self._cands(spec)
        taken = cands[: spec.need]
        if len(taken) < spec.need or any(e.consumes or e.multi for e in taken):
            return self._claim(0)
        self.steps = spec.need + 1
        if self.steps > self.budget:
            raise BudgetExceeded
        self.picks = [Pick(0, spec, e, None) for e in taken]
        self.chosen[(0, 0)] = 0
        return True

    def _claim(self, ci: int) -> bool:
        if ci == len(self.claims):
            return True
        return self._request(ci, 0)

    def _request(self, ci: int, ri: int) -> bool:
        claim = self.claims[ci]
        if ri == len(claim.groups):
            return self._claim(ci + 1)
        if not self._rest_feasible(ci, ri):
            return False
        for si, spec in enumerate(claim.groups[ri]):
            if spec.impossible:
                continue
            if self._pick(ci, ri, spec, 0, 0):
                self.chosen[(ci, ri)] = si
                return True
        return False

    def _rest_feasible(self, ci: int, ri: int) -> bool:
        """Every request from (ci, ri) on still has a subrequest with enough candidates not taken."""
        if not self._exclusive:
            return True
        for cj in range(ci, len(self.claims)):
            groups = self.claims[cj].groups
            for group in groups[ri if cj == ci else 0 :]:
                if not any(self._enough(s) for s in group):
                    return False
        return True

    def _enough(self, spec: RequestSpec) -> bool:
        if spec.impossible:
            return False
        if spec.admin:
            return True
        cands = self._cands(spec)
        free = 0
        for e in cands:
            if e.id not in self._exclusive or not self._exclusive[e.id]:
                free += 1
                if free >= spec.need:
                    return True
        return free >= spec.need

    def _pick(self, ci: int, ri: int, spec: RequestSpec, k: int, start: int) -> bool:
        self.steps += 1
        if self.steps > self.budget:
            raise BudgetExceeded
        if k == spec.need:
            return self._request(ci, ri + 1)
        if spec.all_mode:
            return self._descend(ci, ri, spec, k, spec.selected[k], 0)
        cands = self._cands(spec)
        # A request's devices are distinct, multi-allocatable ones included: Kubernetes looks for the next
        # device of a request after the previous one, so two shares of one device need two requests.
        return any(
            self._descend(ci, ri, spec, k, cands[idx], idx + 1)
            for idx in range(start, len(cands) - (spec.need - k) + 1)
        )

    def _descend(self, ci: int, ri: int, spec: RequestSpec, k: int, entry: DeviceEntry, start: int) -> bool:
        """Take ``entry`` as the k-th device of the request and search on from there (candidates from
        ``start``); True when that leads to a solution, else everything is as before."""
        if not self._take(ci, spec, entry):
            return False
        if self._pick(ci, ri, spec, k + 1, start):
            return True
        self._undo(ci, spec)
        return False

    def _take(self, ci: int, spec: RequestSpec, entry: DeviceEntry) -> bool:
        """Check the attempt-dependent conditions and, when they hold, record the device as picked."""
        if self._held(ci, spec, entry):
            self.rejected["in use"] += 1
            return False
        charge = self._charges(entry)
        if charge and not self._counters_fit(entry):
            self.rejected["counters"] += 1
            return False
        if not self._capacity_fits(spec, entry):
            self.rejected["capacity"] += 1
            return False
        if not self._constrain(ci, spec, entry):
            return False
        self._commit(ci, spec, entry, charge)
        return True

    def _held(self, ci: int, spec: RequestSpec, entry: DeviceEntry) -> bool:
        """Taken by this attempt: by any claim, or for an adminAccess request by its own claim."""
        holders = self._exclusive.get(entry.id)
        return holders is not None and bool(holders) and (ci in holders or not spec.admin)

    def _charges(self, entry: DeviceEntry) -> bool:
        """Whether picking the device consumes its counters (a further share of a multi-allocatable device
        that already has one does not)."""
        did = entry.id
        return bool(entry.consumes) and not (
            entry.multi and (self._shares.get(did) or self.snapshot.shares(did))
        )

    def _counters_fit(self, entry: DeviceEntry) -> bool:
        did = entry.id
        key = PoolKey(did.driver, did.pool)
        view = self.views.get(key) or self.snapshot.pool(key)
        return (
            view is not None
            and not self.snapshot.overdrawn(view)
            and fits_counters(entry, self.snapshot.available_counters(view), self._counters)
        )

    def _capacity_fits(self, spec: RequestSpec, entry: DeviceEntry) -> bool:
        if not entry.multi:
            return True
        demand = spec.demand.get(entry)
        return demand is not None and fits_capacity(
            entry, demand, self.snapshot.consumed_capacity(entry.id), self._capacity.get(entry.id)
        )

    def _constrain(self, ci: int, spec: RequestSpec, entry: DeviceEntry) -> bool:
        failed = try_add(self.constraints[ci], spec.base, spec.full, entry)
        if failed < 0:
            return True
        if len(self.misses) < 64:
            self.misses.append(ConstraintMiss(ci, self.constraints[ci][failed], spec))
        return False

    def _unconstrain(self, ci: int, spec: RequestSpec, entry: DeviceEntry) -> None:
        remove(self.constraints[ci], spec.base, spec.full, entry)

    def _commit(self, ci: int, spec: RequestSpec, entry: DeviceEntry, charge: bool) -> None:
        did = entry.id
        if charge:
            for set_name, counter, value in entry.consumes:
                key = (did.driver, did.pool, set_name, counter)
                self._counters[key] = self._counters.get(key, Fraction(0)) + value
        demand = spec.demand.get(entry) if entry.multi else None
        if demand is not None:
            self._shares[did] = self._shares.get(did, 0) + 1
            used = self._capacity.setdefault(did, {})
            for name, amount in demand.items():
                used[name] = used.get(name, Fraction(0)) + amount
        else:
            self._exclusive.setdefault(did, set()).add(ci)
        self.picks.append(Pick(ci, spec, entry, demand))

    def _undo(self, ci: int, spec: RequestSpec) -> None:
        pick = self.picks.pop()
        entry, did = pick.entry, pick.entry.id
        remove(self.constraints[ci], spec.base, spec.full, entry)
        if entry.multi:
            left = self._shares[did] - 1
            if left:
                self._shares[did] = left
            else:
                del self._shares[did]
            used = self._capacity[did]
            for name, amount in (pick.demand or {}).items():
                used[name] -= amount
            charged = bool(entry.consumes) and not left and not self.snapshot.shares(did)
        else:
            self._exclusive[did].discard(ci)
            charged = bool(entry.consumes)
        if charged:
            for set_name, counter, value in entry.consumes:
                self._counters[(did.driver, did.pool, set_name, counter)] -= value
