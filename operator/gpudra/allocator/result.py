"""What a successful allocation writes into each claim's status.allocation, exactly as Kubernetes writes it.

- results[]: one per device in request order (``req`` or ``req/sub``), with adminAccess when set, the
  request's tolerations, binding conditions, and shareID + consumedCapacity for shares of multi-allocatable
  devices;
- config[]: each used DeviceClass's configs once (FromClass, ``requests`` = the requests that used the class,
  emptied when that is every request), then the claim's configs (FromClaim) that apply to an allocated request
  — once per matching request, as Kubernetes does;
- nodeSelector: ``metadata.name In [node]`` as soon as one device comes from a node-local slice (or binds to
  the node); otherwise the union of the slices' single-term node selectors; none for devices usable
  everywhere.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpudra.allocator.pools import DeviceEntry, DeviceId
from gpudra.allocator.requests import ClaimSpec
from gpudra.allocator.search import Pick
from gpudra.api.dra import (
    AllocationResult,
    DeviceAllocationConfiguration,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
)
from gpudra.api.quantity import format_quantity

_Inputs = tuple[str, int, ClaimSpec, list[Pick], dict[tuple[int, int], int], list[str | None]]
"""What the wire form is built from: node, claim index, claim, its picks, the chosen subrequests, share ids."""


class ClaimAllocation:
    """The allocation of one claim: ``key`` is namespace/name, ``result`` goes to status.allocation.

    The search's picks are kept as they are and the wire form (a pydantic tree of some twenty objects) is built
    on the first read of ``result``: committing needs only the devices (``taken``), and a caller that writes
    the status asks for it once. Share ids are drawn at allocation time, so every read gives the same result.
    Once built, the search's picks are let go: a scheduler keeps every result it wrote, and each object it
    keeps is one more for every full garbage collection to visit.
    """

    __slots__ = ("_inputs", "_result", "key", "taken")

    def __init__(
        self,
        node: str,
        index: int,
        claim: ClaimSpec,
        picks: list[Pick],
        chosen: dict[tuple[int, int], int],
        share_ids: list[str | None],
    ) -> None:
        self.key = claim.key
        self.taken: tuple[DeviceId, ...] | None = (
            tuple(p.entry.id for p in picks if not p.spec.admin) if not any(share_ids) else None
        )
        """The devices the claim takes for itself (adminAccess results take nothing), when none is a share of a
        multi-allocatable device; None when some is (then commit reads ``result``)."""
        self._inputs: _Inputs | None = (node, index, claim, picks, chosen, share_ids)
        self._result: AllocationResult | None = None

    @property
    def result(self) -> AllocationResult:
        if self._result is None:
            assert self._inputs is not None
            self._result = _wire(*self._inputs)
            self._inputs = None
        return self._result

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ClaimAllocation):
            return NotImplemented
        return self.key == other.key and self.result == other.result

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ClaimAllocation(key={self.key!r}, result={self.result!r})"


@dataclass(frozen=True, slots=True)
class Allocation:
    """Success: every claim of the pod got its devices on ``node``."""

    node: str
    claims: list[ClaimAllocation]
    steps: int = 0

    @property
    def ok(self) -> bool:
        return True


def build_results(
    node: str,
    claims: list[ClaimSpec],
    picks: list[Pick],
    chosen: dict[tuple[int, int], int],
    share_id: Callable[[], str],
) -> list[ClaimAllocation]:
    out: list[ClaimAllocation] = []
    for ci, claim in enumerate(claims):
        mine = [p for p in picks if p.claim_index == ci] if len(claims) > 1 else picks
        share_ids = [share_id() if p.demand is not None else None for p in mine]
        out.append(ClaimAllocation(node, ci, claim, mine, chosen, share_ids))
    return out


def _wire(
    node: str,
    ci: int,
    claim: ClaimSpec,
    mine: list[Pick],
    chosen: dict[tuple[int, int], int],
    share_ids: list[str | None],
) -> AllocationResult:
    """One claim's status.allocation from its picks."""
    devices = {
        "results": [_result(p, s) for p, s in zip(mine, share_ids, strict=True)],
        "config": _configs(ci, claim, chosen) or None,
    }
    selector = _node_selector(node, [p.entry for p in mine])
    # One validation builds the whole tree (a third cheaper than building each model on its own).
    return AllocationResult.model_validate({"devices": devices, "node_selector": selector})


def _result(pick: Pick, share_id: str | None) -> dict[str, Any]:
    """A DeviceRequestAllocationResult as its fields, unset ones left out."""
    entry, spec = pick.entry, pick.spec
    device = entry.device
    out: dict[str, Any] = {
        "request": spec.full,
        "driver": entry.id.driver,
        "pool": entry.id.pool,
        "device": entry.id.device,
    }
    if spec.admin:
        out["admin_access"] = True
    if spec.tolerations:
        out["tolerations"] = spec.tolerations
    if device.binding_conditions:
        out["binding_conditions"] = device.binding_conditions
    if device.binding_failure_conditions:
        out["binding_failure_conditions"] = device.binding_failure_conditions
    if pick.demand is not None:
        out["share_id"] = share_id
        if pick.demand:
            out["consumed_capacity"] = {k: format_quantity(v) for k, v in pick.demand.items()}
    return out


def _configs(
    ci: int, claim: ClaimSpec, chosen: dict[tuple[int, int], int]
) -> list[DeviceAllocationConfiguration]:
    configs: list[DeviceAllocationConfiguration] = []
    by_class: dict[str, list[int]] = {}
    n_requests = len(claim.groups)
    selected_full: list[str] = []
    for ri, group in enumerate(claim.groups):
        spec = group[chosen.get((ci, ri), 0)]
        selected_full.append(spec.full)
        positions = by_class.get(spec.class_name)
        if positions is not None:
            for pos in positions:
                configs[pos].requests = [*(configs[pos].requests or []), spec.full]
            continue
        positions = []
        for class_cfg in spec.device_class.spec.config or ():
            positions.append(len(configs))
            configs.append(
                DeviceAllocationConfiguration(
                    source="FromClass", requests=[spec.full], opaque=class_cfg.opaque
                )
            )
        by_class[spec.class_name] = positions
    for cfg in configs:
        if cfg.requests is not None and len(cfg.requests) == n_requests:
            cfg.requests = None
    requests = claim.claim.spec.devices.requests or []
    for claim_cfg in claim.claim.spec.devices.config or ():
        names = claim_cfg.requests
        if not names:
            configs.append(DeviceAllocationConfiguration(source="FromClaim", opaque=claim_cfg.opaque))
            continue
        for ri, request in enumerate(requests):
            if request.name in names or (claim.first_available[ri] and selected_full[ri] in names):
                configs.append(
                    DeviceAllocationConfiguration(
                        source="FromClaim", requests=list(names), opaque=claim_cfg.opaque
                    )
                )
    return configs


def _node_selector(node: str, entries: list[DeviceEntry]) -> NodeSelector | None:
    """The claim's nodeSelector: a model, or its fields for the common node-local case."""
    fields: list[NodeSelectorRequirement] = []
    exprs: list[NodeSelectorRequirement] = []
    for entry in entries:
        if entry.node_name or entry.binds_to_node:
            return _on_node(node)
        if entry.node_selector:
            terms = entry.node_selector.get("nodeSelectorTerms") or []
            if len(terms) == 1:
                _merge(terms[0].get("matchFields") or [], fields)
                _merge(terms[0].get("matchExpressions") or [], exprs)
    if not fields and not exprs:
        return None
    return NodeSelector(
        node_selector_terms=[NodeSelectorTerm(match_fields=fields or None, match_expressions=exprs or None)]
    )


@functools.lru_cache(maxsize=8192)
def _on_node(node: str) -> NodeSelector:
    """``metadata.name In [node]``, one object per node shared by the node's results (a dozen objects less per
    claim for the garbage collector to visit). Shared: a result's node selector is never changed in place (the
    scheduler copies a result with ``model_copy(update=...)``, which replaces fields, not their contents)."""
    name = NodeSelectorRequirement(key="metadata.name", operator="In", values=[node])
    return NodeSelector(node_selector_terms=[NodeSelectorTerm(match_fields=[name])])


def _merge(source: list[dict[str, Any]], into: list[NodeSelectorRequirement]) -> None:
    for raw in source:
        req = NodeSelectorRequirement.model_validate(raw)
        same = any(
            r.key == req.key and r.operator == req.operator and set(r.values or ()) == set(req.values or ())
            for r in into
        )
        if not same:
            into.append(req)
