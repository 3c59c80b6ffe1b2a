"""Requests of the claims being allocated, resolved against DeviceClasses and compiled selectors, and the per-
node candidate lists the search walks.

Selector outcomes are cached on each :class:`DeviceEntry` per CEL expression, so a device is evaluated once
per expression for the life of its slice, whichever pod or node asks.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol

from gpudra.allocator import celfacts
from gpudra.allocator.cel.celview import Schema
from gpudra.allocator.counters import capacity_demand, fits_capacity, fits_counters
from gpudra.allocator.index import DeviceIndex
from gpudra.allocator.pools import DeviceEntry, PoolKey, PoolView
from gpudra.allocator.snapshot import ClusterSnapshot, NodePools
from gpudra.api.dra import DeviceClass, DeviceSelector, DeviceTaint, DeviceToleration, ResourceClaim
from gpudra.api.quantity import parse_quantity
from gpudra.errors import GpudraError, InvalidInputError

ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"


class Selector(Protocol):
    """A compiled CEL selector (gpudra.allocator.cel.selectors.CompiledSelector satisfies it)."""

    expression: str

    def matches(self, device: Any) -> bool: ...


CompileSelector = Callable[[str], Selector]
DeviceView = Callable[[str, Any], Any] | None
"""How a selector sees a device: None for the CEL view built with the device's entry (what gpudra uses), or a
function of (driver, Device) for selectors of another kind (tests)."""


class RequestProblem(GpudraError):
    """A request that cannot be allocated anywhere; ``reason`` is a reason code of allocator.explain."""

    def __init__(self, reason: str, message: str, *, claim: str = "", request: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.claim = claim
        self.request = request


class SelectorRuntimeError(GpudraError):
    """A CEL selector failed while evaluating a device: an error for this node, as in kube-scheduler."""

    def __init__(self, message: str, *, expression: str, device: str) -> None:
        super().__init__(message)
        self.expression = expression
        self.device = device


@dataclass(slots=True, eq=False)
class RequestSpec:
    """One request (or one firstAvailable subrequest) ready to allocate."""

    claim_index: int
    base: str
    full: str
    class_name: str
    device_class: DeviceClass
    class_selectors: tuple[Selector, ...]
    request_selectors: tuple[Selector, ...]
    all_mode: bool
    count: int
    admin: bool
    tolerations: list[DeviceToleration] | None
    capacity_requests: dict[str, Fraction]
    expressions: tuple[str, ...] = ()
    """The expressions of ``selectors``, in order."""
    selection_key: Hashable = ()
    """The expressions, the capacity requests and the mode: what decides which of a node's devices the request
    selects (see ``Selection``)."""
    # per node, filled by select():
    selected: list[DeviceEntry] = field(default_factory=list)
    usable: list[DeviceEntry] = field(default_factory=list)
    demand: dict[DeviceEntry, dict[str, Fraction]] = field(default_factory=dict)
    need: int = 0
    impossible: bool = False
    failing: dict[DeviceEntry, SelectorRuntimeError] = field(default_factory=dict)
    """Devices of the node on which a selector fails at runtime: Kubernetes fails the allocation only if its
    search reaches one of them (kubeorder), so they are recorded here instead of failing the node."""

    @property
    def selectors(self) -> tuple[Selector, ...]:
        return self.class_selectors + self.request_selectors

    def fresh(self, claim_index: int) -> RequestSpec:
        """The same request, for the claim at ``claim_index`` of a pod, without any node's state."""
        return RequestSpec(
            claim_index, self.base, self.full, self.class_name, self.device_class, self.class_selectors,
            self.request_selectors, self.all_mode, self.count, self.admin, self.tolerations,
            self.capacity_requests, self.expressions, self.selection_key,
        )  # fmt: skip


@dataclass(slots=True)
class ClaimSpec:
    claim: ResourceClaim
    key: str
    groups: list[list[RequestSpec]]
    first_available: list[bool]


def claim_key(claim: ResourceClaim) -> str:
    name = claim.metadata.name or claim.metadata.generate_name or "?"
    return f"{claim.metadata.namespace or 'default'}/{name}"


_SPEC_JSON_LIMIT = 4096
_spec_json: dict[tuple[str, str], tuple[object, str]] = {}
"""Per claim (uid, resourceVersion): its parsed spec and that spec as JSON."""


def spec_json(claim: ResourceClaim) -> str:
    """The claim's spec as JSON (what claims of one shape share), made once per parsed spec: a controller asks
    for it for every pending claim at each explanation round. Kept by the claim's uid and resourceVersion, for
    the very spec object it was made from (parsed specs are not changed in place), so a claim parsed anew, or one
    with neither, is serialized again."""
    meta = claim.metadata
    key = (meta.uid or "", meta.resource_version or "")
    known = _spec_json.get(key)
    if known is not None and known[0] is claim.spec:
        return known[1]
    text = claim.spec.model_dump_json()
    if key[0] and key[1]:
        if len(_spec_json) >= _SPEC_JSON_LIMIT:
            _spec_json.clear()
        _spec_json[key] = (claim.spec, text)
    return text


def _compile(
    compile_selector: CompileSelector, selectors: list[DeviceSelector] | None, where: str
) -> tuple[Selector, ...]:
    out: list[Selector] = []
    for i, sel in enumerate(selectors or ()):
        if sel.cel is None:
            raise RequestProblem("InvalidSelector", f"{where}: selector #{i} has no CEL expression")
        try:
            out.append(compile_selector(sel.cel.expression))
        except InvalidInputError as err:
            raise RequestProblem("InvalidSelector", f"{where}: selector #{i}: {err}") from err
    return tuple(out)


def build_claim(
    index: int,
    claim: ResourceClaim,
    classes: Mapping[str, DeviceClass],
    compile_selector: CompileSelector,
    namespace_labels: Mapping[str, str] | None,
) -> ClaimSpec:
    """Resolve every request of a claim; raise RequestProblem for what no node could fix."""
    key = claim_key(claim)
    groups: list[list[RequestSpec]] = []
    first: list[bool] = []
    for request in claim.spec.devices.requests or ():
        try:
            if request.exactly is not None:
                ex = request.exactly
                if ex.admin_access and (namespace_labels or {}).get(ADMIN_ACCESS_LABEL) != "true":
                    raise RequestProblem(
                        "AdminAccessDenied",
                        f"adminAccess needs namespace {claim.metadata.namespace or 'default'} labelled "
                        f"{ADMIN_ACCESS_LABEL}=true",
                    )
                capacity = ex.capacity.requests if ex.capacity else None
                spec = _spec(index, request.name, request.name, ex.device_class_name, ex.selectors,
                             ex.allocation_mode, ex.count, bool(ex.admin_access), ex.tolerations,
                             capacity, classes, compile_selector)  # fmt: skip
                groups.append([spec])
                first.append(False)
            elif request.first_available:
                subs = [
                    _spec(
                        index,
                        request.name,
                        f"{request.name}/{sub.name}",
                        sub.device_class_name,
                        sub.selectors,
                        sub.allocation_mode,
                        sub.count,
                        False,
                        sub.tolerations,
                        sub.capacity.requests if sub.capacity else None,
                        classes,
                        compile_selector,
                    )
                    for sub in request.first_available
                ]
                groups.append(subs)
                first.append(True)
            else:
                raise RequestProblem("InvalidSelector", "request has neither exactly nor firstAvailable")
        except RequestProblem as problem:
            problem.claim, problem.request = key, request.name
            raise
    return ClaimSpec(claim, key, groups, first)


def _spec(
    claim_index: int,
    base: str,
    full: str,
    class_name: str,
    selectors: list[DeviceSelector] | None,
    mode: str | None,
    count: int | None,
    admin: bool,
    tolerations: list[DeviceToleration] | None,
    capacity: dict[str, str] | None,
    classes: Mapping[str, DeviceClass],
    compile_selector: CompileSelector,
) -> RequestSpec:
    device_class = classes.get(class_name)
    if device_class is None:
        raise RequestProblem("ClassNotFound", f"request {full}: DeviceClass {class_name} not found")
    class_sel = _compile(compile_selector, device_class.spec.selectors, f"DeviceClass {class_name}")
    req_sel = _compile(compile_selector, selectors, f"request {full}")
    all_mode = mode == "All"
    capacity_requests = {k: parse_quantity(v) for k, v in (capacity or {}).items()}
    expressions = tuple(s.expression for s in class_sel + req_sel)
    return RequestSpec(
        claim_index=claim_index,
        base=base,
        full=full,
        class_name=class_name,
        device_class=device_class,
        class_selectors=class_sel,
        request_selectors=req_sel,
        all_mode=all_mode,
        count=1 if count is None else count,
        admin=admin,
        tolerations=tolerations,
        capacity_requests=capacity_requests,
        expressions=expressions,
        selection_key=(expressions, tuple(sorted(capacity_requests.items())), all_mode),
    )


# ---------------------------------------------------------------- evaluation


def evaluate(selector: Selector, entry: DeviceEntry, device_view: DeviceView) -> bool:
    """Whether the device passes the selector (cached); raises SelectorRuntimeError on a CEL runtime error."""
    outcome = entry.matches.get(selector.expression)
    if outcome is None:
        try:
            if device_view is not None:
                outcome = bool(selector.matches(device_view(entry.id.driver, entry.device)))
            elif entry.view is None:
                outcome = InvalidInputError(entry.view_error)
            else:
                outcome = bool(selector.matches(entry.view))
        except GpudraError as err:
            outcome = err
        entry.matches[selector.expression] = outcome
    if isinstance(outcome, Exception):
        raise SelectorRuntimeError(
            f"CEL runtime error in {selector.expression!r} on device {entry.id}: {outcome}",
            expression=selector.expression,
            device=str(entry.id),
        ) from outcome
    return outcome


def tolerated(taint: DeviceTaint, tolerations: list[DeviceToleration] | None) -> bool:
    """Kubernetes' ToleratesTaint: key (when set) and effect (when set) must match; Exists tolerates any
    value, Equal needs the same value."""
    for t in tolerations or ():
        if t.key and t.key != taint.key:
            continue
        if t.effect and t.effect != taint.effect:
            continue
        if t.operator == "Exists" or (t.value or "") == (taint.value or ""):
            return True
    return False


def all_tolerated(entry: DeviceEntry, tolerations: list[DeviceToleration] | None) -> bool:
    return all(tolerated(t, tolerations) for t in entry.taints)


# Why a selected device is not usable, in the order Kubernetes checks (selectors come before all of these).
IN_USE, TAINTED, COUNTERS, CAPACITY = "in use", "tainted", "counters exhausted", "capacity exhausted"


def blocker(
    spec: RequestSpec,
    entry: DeviceEntry,
    snapshot: ClusterSnapshot,
    views: Mapping[PoolKey, PoolView] | None = None,
) -> str | None:
    """What keeps a selected device from this request given what is already allocated (None: usable).
    ``views`` are the node's own views of its pools (NodePools.views), for their counters."""
    if not spec.admin and snapshot.in_use(entry.id):
        return IN_USE
    if entry.taints and not all_tolerated(entry, spec.tolerations):
        return TAINTED
    if entry.consumes and not (entry.multi and snapshot.shares(entry.id)):
        key = PoolKey(entry.id.driver, entry.id.pool)
        view = (views or {}).get(key) or snapshot.pool(key)
        if (
            view is None
            or snapshot.overdrawn(view)
            or not fits_counters(entry, snapshot.available_counters(view), None)
        ):
            return COUNTERS
    demand = spec.demand.get(entry)
    if demand is None:
        return CAPACITY
    committed = snapshot.consumed_capacity(entry.id) if entry.multi else {}
    if not fits_capacity(entry, demand, committed, None):
        return CAPACITY
    return None


_NO_DEMAND: dict[str, Fraction] = {}
"""A device that is not multi-allocatable, for a request without capacity requests, always holds it."""


@dataclass(slots=True)
class Selection:
    """What a node's devices are for one combination of selectors, capacity requests and mode; it changes only
    with the node's slices, so it is kept on the node's ``NodePools`` and reused by every claim of that shape.
    """

    selected: list[DeviceEntry]
    failing: dict[DeviceEntry, SelectorRuntimeError]
    demand: dict[DeviceEntry, dict[str, Fraction]]
    plain: bool
    """No selected device has taints, counters or multiple allocations and nothing is requested of its
    capacity: then only being in use keeps one from the request."""


def select(
    spec: RequestSpec, node_pools: NodePools, snapshot: ClusterSnapshot, device_view: DeviceView
) -> None:
    """Fill ``selected`` / ``usable`` / ``failing`` / ``need`` / ``impossible`` of a spec for one node."""
    chosen = _selected(spec, node_pools, snapshot, device_view)
    selected = chosen.selected
    spec.selected = selected
    spec.failing = chosen.failing
    spec.demand = chosen.demand
    if not chosen.plain:
        spec.usable = [e for e in selected if blocker(spec, e, snapshot, node_pools.views) is None]
    elif spec.admin:
        spec.usable = list(selected)
    else:
        spec.usable = snapshot.not_in_use(selected)
    if spec.all_mode:
        spec.need = len(selected)
        spec.impossible = (
            not selected
            or len(spec.usable) < len(selected)
            or bool(node_pools.incomplete)
            or bool(node_pools.invalid)
        )
    else:
        spec.need = spec.count
        spec.impossible = len(spec.usable) < spec.count


def fails_on(
    spec: RequestSpec, node_pools: NodePools, snapshot: ClusterSnapshot, device_view: DeviceView
) -> bool:
    """Whether a selector of the request fails at runtime on a device of the node (in use or not)."""
    return bool(_selected(spec, node_pools, snapshot, device_view).failing)


def _selected(
    spec: RequestSpec, node_pools: NodePools, snapshot: ClusterSnapshot, device_view: DeviceView
) -> Selection:
    key = (spec.selection_key, device_view)
    chosen = node_pools.selections.get(key)
    if chosen is None:
        chosen = node_pools.selections[key] = _selection(spec, node_pools, snapshot, device_view)
    return chosen


def passes_all(spec: RequestSpec, schema: Schema, index: DeviceIndex) -> bool:
    """Whether every device of the schema's group in the index passes every selector of the request, as the
    group's value counts tell (``celfacts``), without evaluating a device. Remembered in the index until its
    counts change (at most 4,096 answers, like the allocator's other caches)."""
    key = (spec.expressions, schema)
    known = index.memo.get(key)
    if known is None:
        if len(index.memo) > 4096:
            index.memo.clear()
        group = index.groups.get(schema)
        trees = [getattr(s, "tree", None) for s in spec.selectors]
        known = index.memo[key] = group is not None and all(
            t is not None and celfacts.outcomes(t, group) == celfacts.TRUE for t in trees
        )
    return known


def _selection(
    spec: RequestSpec, node_pools: NodePools, snapshot: ClusterSnapshot, device_view: DeviceView
) -> Selection:
    selectors = spec.selectors
    selected: list[DeviceEntry] = []
    failing: dict[DeviceEntry, SelectorRuntimeError] = {}
    demand: dict[DeviceEntry, dict[str, Fraction]] = {}
    # A device of a group on which every selector is true is taken without evaluating it. Only devices the
    # index counts qualify: those with a view, of a pool the node sees whole (an older generation seen from
    # a node is not indexed); a custom device_view is evaluated as given.
    indexed: set[PoolKey] = set()
    if device_view is None and selectors:
        indexed = {key for key, view in node_pools.views.items() if snapshot.pool(key) is view}
    sure: dict[Schema, bool] = {}
    for entry in node_pools.visible:
        certain = False
        if indexed and entry.view is not None and entry.id[:2] in indexed:
            known = sure.get(entry.schema)
            if known is None:
                known = sure[entry.schema] = passes_all(spec, entry.schema, snapshot.index)
            certain = known
        try:
            if not certain and not all(evaluate(s, entry, device_view) for s in selectors):
                continue
        except SelectorRuntimeError as err:
            failing[entry] = err
            continue
        if id(entry) in node_pools.elsewhere:
            continue  # another node's device in a perDeviceNodeSelection slice: checked after the selectors
        d = (
            _NO_DEMAND
            if not (spec.capacity_requests or entry.multi)
            else capacity_demand(spec.capacity_requests, entry)
        )
        if d is not None:
            demand[entry] = d
        if spec.all_mode and (d is None or not fits_capacity(entry, d, {}, None)):
            continue  # Kubernetes leaves devices that can never hold the request out of "all"
        selected.append(entry)
    plain = not spec.capacity_requests and not any(e.taints or e.consumes or e.multi for e in selected)
    return Selection(selected, failing, demand, plain)
