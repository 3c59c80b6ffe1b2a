"""Kubernetes' search step for step, for the claims where its order decides more than which devices come first.

Two things make kube-scheduler's allocator give up on a node (with an error that aborts the pod's scheduling
attempt) only if its search happens to get there:

- a CEL selector that fails at runtime on some device: Kubernetes evaluates selectors lazily, device by device
  in its order (pools by driver and name, slices by name, devices in slice order), after skipping devices
  that are in use, so the error counts only when the search reaches that device while it is free;
- a constraint broken by a device of an ``All`` request: Kubernetes stops the whole allocation there instead of
  trying other choices for earlier requests.

:class:`Search` prunes branches Kubernetes walks through, so it could miss such a point, or find a solution
Kubernetes never reaches. :class:`KubeOrderSearch` walks every branch in Kubernetes' order instead (still only
combinations, never permutations, of a request's devices, as Kubernetes does) and raises where it would
stop. The engine uses it only for claims with one of the two cases above; both searches share the step budget.
"""

from __future__ import annotations

from gpudra.allocator import kubeerrors
from gpudra.allocator.constraints import Constraint
from gpudra.allocator.pools import DeviceEntry
from gpudra.allocator.requests import ClaimSpec, RequestSpec, SelectorRuntimeError, all_tolerated, blocker
from gpudra.allocator.search import BudgetExceeded, Search
from gpudra.allocator.snapshot import ClusterSnapshot, NodePools


class AllocationAborted(Exception):
    """Kubernetes stops the whole allocation here with an error; ``reason`` is an explain reason code."""

    def __init__(self, reason: str, message: str, kube: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.kube = kube
        """Kubernetes' own words for the error (``kubeerrors``)."""


class SelectorFailed(Exception):
    """The search reached a device on which a selector of ``spec`` fails at runtime: Kubernetes stops there."""

    def __init__(self, error: SelectorRuntimeError, spec: RequestSpec) -> None:
        super().__init__(str(error))
        self.error = error
        self.spec = spec


def needs_kube_order(claims: list[ClaimSpec], constraints: list[list[Constraint]]) -> bool:
    """Whether the order of Kubernetes' search can change the answer: a selector fails on some device of the
    node, or an ``All`` request falls under a constraint."""
    for ci, claim in enumerate(claims):
        for group in claim.groups:
            for spec in group:
                if spec.failing:
                    return True
                if spec.all_mode and any(c.applies(spec.base, spec.full) for c in constraints[ci]):
                    return True
    return False


class KubeOrderSearch(Search):
    """Kubernetes' depth-first search without pruning over the node's visible devices in order."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        claims: list[ClaimSpec],
        constraints: list[list[Constraint]],
        budget: int,
        pools: NodePools,
    ) -> None:
        super().__init__(snapshot, claims, constraints, budget, pools.views)
        self.entries = pools.visible
        self._matches = {
            id(spec): {id(e) for e in spec.selected} for c in claims for g in c.groups for spec in g
        }

    def run(self) -> bool:
        """Always the whole walk: which device a selector fails on first depends on it."""
        return self._claim(0)

    def _request(self, ci: int, ri: int) -> bool:
        claim = self.claims[ci]
        if ri == len(claim.groups):
            return self._claim(ci + 1)
        for si, spec in enumerate(claim.groups[ri]):
            if self._pick(ci, ri, spec, 0, 0):
                self.chosen[(ci, ri)] = si
                return True
        return False

    def _pick(self, ci: int, ri: int, spec: RequestSpec, k: int, start: int) -> bool:
        self.steps += 1
        if self.steps > self.budget:
            raise BudgetExceeded
        if spec.all_mode and not spec.selected:
            return False  # "All" of nothing is not a solution
        if k == spec.need:
            return self._request(ci, ri + 1)
        if spec.all_mode:
            return self._all(ci, ri, spec, k)
        matches = self._matches[id(spec)]
        for idx in range(start, len(self.entries)):
            entry = self.entries[idx]
            if self._busy(ci, spec, entry):
                continue
            error = spec.failing.get(entry)
            if error is not None:
                raise SelectorFailed(error, spec)
            if id(entry) not in matches or blocker(spec, entry, self.snapshot, self.views) is not None:
                continue
            if self._descend(ci, ri, spec, k, entry, idx + 1):
                return True
        return False

    def _busy(self, ci: int, spec: RequestSpec, entry: DeviceEntry) -> bool:
        """Kubernetes skips devices in use before it evaluates any selector on them."""
        return (not spec.admin and self.snapshot.in_use(entry.id)) or self._held(ci, spec, entry)

    def _all(self, ci: int, ri: int, spec: RequestSpec, k: int) -> bool:
        """The k-th device of an ``All`` request, with Kubernetes' checks in its order: in use, counters,
        taints, then the constraints (a violation stops everything), then capacity."""
        entry = spec.selected[k]
        if self._busy(ci, spec, entry):
            return False
        charge = self._charges(entry)
        if charge and not self._counters_fit(entry):
            return False
        if entry.taints and not all_tolerated(entry, spec.tolerations):
            return False
        if not self._constrain(ci, spec, entry):
            raise AllocationAborted(
                "ConstraintConflict",
                f"request {spec.full} asks for all matching devices, but device {entry.id} breaks a constraint "
                "of the claim",
                kubeerrors.all_mode_constraint(self.claims[ci].key, spec, str(entry.id)),
            )
        if not self._capacity_fits(spec, entry):
            self._unconstrain(ci, spec, entry)
            return False
        self._commit(ci, spec, entry, charge)
        if self._pick(ci, ri, spec, k + 1, 0):
            return True
        self._undo(ci, spec)
        return False
