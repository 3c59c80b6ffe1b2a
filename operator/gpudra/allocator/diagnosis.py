"""Why a pod's claims cannot be allocated: structured data for the CLI and a short text for Events.

Reason codes (a small fixed set; one per failing request and one per node):

===================== =================================================================================
NoMatchingDevice      no device on the node passes the class and request selectors
InsufficientDevices   fewer matching devices than requested, or the requests compete for the same devices
DevicesInUse          enough devices match, but too many are already allocated
Tainted               enough devices match, but their taints are not tolerated by the request
CounterExhausted      partitionable devices match, but their shared counters (e.g. a GPU's memory slices)
                      are used up by allocated partitions
InsufficientCapacity  consumable capacity left on matching devices is too small for the request
ConstraintConflict    each request could be met alone, but not with matchAttribute / distinctAttribute
PoolIncomplete        a pool the node can reach is being republished (fewer slices than announced)
PoolInvalid           a pool is invalid (duplicate device names, unknown counters) and is skipped
InvalidSelector       a CEL selector does not compile, or failed at runtime on a device of this node
ClassNotFound         the request names a DeviceClass that does not exist
AdminAccessDenied     adminAccess in a namespace without resource.kubernetes.io/admin-access=true
SearchLimit           the search gave up after its step budget (the claim is too combinatorial)
===================== =================================================================================
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpudra.allocator import kubeerrors
from gpudra.allocator.constraints import Constraint
from gpudra.allocator.pools import AttrValue, DeviceEntry, DeviceId, PoolKey, members
from gpudra.allocator.requests import (
    CAPACITY,
    COUNTERS,
    IN_USE,
    TAINTED,
    ClaimSpec,
    DeviceView,
    RequestSpec,
    SelectorRuntimeError,
    blocker,
    evaluate,
    tolerated,
)
from gpudra.allocator.search import ConstraintMiss
from gpudra.allocator.snapshot import ClusterSnapshot, NodePools
from gpudra.allocator.vocabulary import Kind, common_kind, kind_of

REASONS = (
    "NoMatchingDevice",
    "InsufficientDevices",
    "DevicesInUse",
    "Tainted",
    "CounterExhausted",
    "InsufficientCapacity",
    "ConstraintConflict",
    "PoolIncomplete",
    "PoolInvalid",
    "InvalidSelector",
    "ClassNotFound",
    "AdminAccessDenied",
    "SearchLimit",
)

_BLOCKER_REASON = {IN_USE: "DevicesInUse", TAINTED: "Tainted", COUNTERS: "CounterExhausted",
                   CAPACITY: "InsufficientCapacity"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class SelectorStat:
    """How many of the node's devices one selector eliminated."""

    source: str  # "class <name>" or "request"
    expression: str
    eliminated: int


MATCHES, SELECTOR = "", "selector"
"""DeviceMiss.miss besides the blockers of allocator.requests: the device is usable; it fails request selectors."""


@dataclass(frozen=True, slots=True)
class DeviceMiss:
    """One device of the node and what keeps it from the request, if anything: ``miss`` is "" (usable), a
    blocker of allocator.requests (in use, tainted, counters exhausted, capacity exhausted), or "selector"."""

    device: DeviceId
    kind: Kind
    miss: str
    failed: tuple[str, ...] = ()
    """The request selectors it fails (for "selector")."""
    taints: tuple[str, ...] = ()
    """The taints the request does not tolerate, as ``key=value:Effect``."""
    blocked_by: tuple[DeviceId, ...] = ()
    """Allocated devices that keep it: itself when in use; the devices sharing its counters when exhausted."""
    shown: tuple[tuple[str, str], ...] = ()
    """The device's values of what its failing selector reads (name, value), when that is one attribute."""
    blocker_kind: Kind | None = None
    """What the devices in ``blocked_by`` are (for counters: the partitions that overlap it)."""


@dataclass(frozen=True, slots=True)
class ConstraintShortfall:
    """A constraint no value of the node satisfies: the most devices one value (or distinct values) gives."""

    attribute: str
    distinct: bool
    requests: tuple[str, ...]
    need: int
    best: int
    lists: int = 0
    """Usable devices whose value is a list, where lists are not compared as sets (kube-scheduler 1.36): each
    joins a constraint only as its first device."""


NEAR_MISSES = 64
"""Devices failing only request selectors kept per request and node (the fewest failed selectors first)."""


@dataclass(slots=True)
class RequestDiagnosis:
    """The numbers behind one failing request (or subrequest) on one node."""

    claim: str
    request: str
    reason: str
    message: str = ""
    needed: int = 0
    devices: int = 0
    class_kept: int = 0
    request_kept: int = 0
    free: int = 0
    in_use: int = 0
    tainted: int = 0
    counters_exhausted: int = 0
    capacity_short: int = 0
    selectors: list[SelectorStat] = field(default_factory=list)
    candidates: list[DeviceMiss] = field(default_factory=list)
    """The devices that pass the selectors (usable or blocked), then the nearest that fail request selectors."""
    class_left_out: dict[Kind, int] = field(default_factory=dict)
    """Devices the class selectors leave out, by kind."""
    class_only: int = 0
    """Devices that fail only class selectors (the class is why they do not match)."""
    class_expression: str = ""
    """The class selector that left out most devices."""
    constraint: str | None = None
    values: dict[str, int] = field(default_factory=dict)
    shortfall: ConstraintShortfall | None = None
    pool_slices: tuple[str, int, int] | None = None
    """An incomplete pool: its name, slices published, slices announced."""
    error_device: str = ""
    """A selector's runtime error: the device it failed on."""
    error_hint: str = ""

    @property
    def base(self) -> str:
        return self.request.split("/", 1)[0]


@dataclass(slots=True)
class Failure:
    """The pod's claims cannot be allocated on ``node`` (or anywhere, when ``node`` is None)."""

    node: str | None
    reason: str
    requests: list[RequestDiagnosis] = field(default_factory=list)
    pools_incomplete: list[str] = field(default_factory=list)
    pools_invalid: list[str] = field(default_factory=list)
    message: str = ""
    steps: int = 0
    aborts: str = ""
    """Kubernetes' allocator's error in its own words when it answers with an error here rather than with the
    node's unschedulability (kube-scheduler then aborts the pod's scheduling attempt, see ``kubeerrors``)."""

    @property
    def ok(self) -> bool:
        return False


@dataclass(slots=True)
class NodesFailure:
    """No node fits: the per-node failures and how many nodes failed for each reason."""

    total: int
    failures: list[Failure]
    by_reason: dict[str, int]
    settled: bool = False
    """No request of the claims passes its selectors on any device in the cluster: the answer is the same
    whatever is allocated, until the slices, the classes or the nodes change."""

    @property
    def ok(self) -> bool:
        return False

    @property
    def reason(self) -> str:
        return max(self.by_reason.items(), key=lambda kv: kv[1])[0] if self.by_reason else "NoMatchingDevice"


def diagnose(
    spec: RequestSpec,
    claim: str,
    node_pools: NodePools,
    snapshot: ClusterSnapshot,
    device_view: DeviceView,
) -> RequestDiagnosis:
    """What happened to every device of the node for this request: counts per selector and blocker, and each
    device that passes the selectors or fails only request selectors."""
    entries = [e for _, es in node_pools.usable for e in es]
    d = RequestDiagnosis(claim=claim, request=spec.full, reason="", devices=len(entries))
    named = [(f"class {spec.class_name}", s) for s in spec.class_selectors] + [
        ("request", s) for s in spec.request_selectors
    ]
    n_class = len(spec.class_selectors)
    eliminated = [0] * len(named)
    near: list[DeviceMiss] = []
    left_out: Counter[Kind] = Counter()
    for entry in entries:
        failed = [i for i, (_, s) in enumerate(named) if not _safe(s, entry, device_view)]
        for i in failed:
            eliminated[i] += 1
        if any(i < n_class for i in failed):
            left_out[kind_of(entry)] += 1
            if all(i < n_class for i in failed):
                d.class_only += 1
            continue
        d.class_kept += 1
        if failed:
            exprs = tuple(named[i][1].expression for i in failed)
            near.append(DeviceMiss(entry.id, kind_of(entry), SELECTOR, exprs,
                                   shown=_shown(named[failed[0]][1], entry)))  # fmt: skip
    d.selectors = [
        SelectorStat(src, s.expression, n) for (src, s), n in zip(named, eliminated, strict=True) if n
    ]
    class_stats = [
        (n, s.expression) for (src, s), n in zip(named, eliminated, strict=True) if src != "request"
    ]
    d.class_expression = max(class_stats)[1] if any(n for n, _ in class_stats) else ""
    d.class_left_out = dict(left_out)
    d.request_kept = len(spec.selected)
    d.needed = spec.need if not spec.all_mode else max(spec.need, 1)
    counts: Counter[str] = Counter()
    kept: list[DeviceMiss] = []
    for entry in spec.selected:
        b = blocker(spec, entry, snapshot)
        kept.append(_blocked(spec, entry, b, snapshot))
        if b is None:
            d.free += 1
        else:
            counts[b] += 1
    near.sort(key=lambda m: len(m.failed))
    d.candidates = kept + near[:NEAR_MISSES]
    d.in_use, d.tainted = counts[IN_USE], counts[TAINTED]
    d.counters_exhausted, d.capacity_short = counts[COUNTERS], counts[CAPACITY]
    d.reason, d.message = _classify(spec, d, node_pools, counts)
    if d.reason == "PoolIncomplete" and node_pools.incomplete:
        d.pool_slices = pool_progress(snapshot, node_pools.incomplete[0])
    return d


def _shown(selector: object, entry: DeviceEntry) -> tuple[tuple[str, str], ...]:
    """The device's value of the one attribute or capacity the selector reads (empty when it reads more)."""
    reads = getattr(selector, "reads", None)
    if reads is None or reads.everything or reads.attribute_domains or reads.capacity_domains:
        return ()
    named = [("a", d, n) for d, n in reads.attributes] + [("c", d, n) for d, n in reads.capacity]
    if len(named) != 1:
        return ()
    where, domain, name = named[0]
    if where == "a":
        value = entry.attributes.get(f"{domain}/{name}")
        return ((name, str(value[1])),) if value is not None else ((name, "none"),)
    key = name if domain == entry.id.driver else f"{domain}/{name}"
    capacity = (entry.device.capacity or {}).get(key)
    return ((name, capacity.value if capacity is not None else "none"),)


def _blocked(spec: RequestSpec, entry: DeviceEntry, b: str | None, snapshot: ClusterSnapshot) -> DeviceMiss:
    kind = kind_of(entry)
    if b is None:
        return DeviceMiss(entry.id, kind, MATCHES)
    if b == IN_USE:  # its taints too: freeing it would not be enough
        return DeviceMiss(entry.id, kind, b, taints=_untolerated(spec, entry), blocked_by=(entry.id,))
    if b == TAINTED:
        return DeviceMiss(entry.id, kind, b, taints=_untolerated(spec, entry))
    if b == COUNTERS:
        sharers = _sharing_counters(entry, snapshot)
        kinds = [kind_of(e) for e in sharers]
        return DeviceMiss(entry.id, kind, b, blocked_by=tuple(e.id for e in sharers),
                          blocker_kind=common_kind(kinds).generic() if kinds else None)  # fmt: skip
    return DeviceMiss(entry.id, kind, b, blocked_by=(entry.id,) if snapshot.shares(entry.id) else ())


def _untolerated(spec: RequestSpec, entry: DeviceEntry) -> tuple[str, ...]:
    """The device's taints the request does not tolerate, as ``key=value:Effect``."""
    return tuple(
        f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"
        for t in entry.taints
        if not tolerated(t, spec.tolerations)
    )


def _sharing_counters(entry: DeviceEntry, snapshot: ClusterSnapshot) -> list[DeviceEntry]:
    """Allocated devices of the pool that consume from the counter sets this device needs."""
    pool = snapshot.pool(PoolKey(entry.id.driver, entry.id.pool))
    if pool is None:
        return []
    sets = {set_name for set_name, _, _ in entry.consumes}
    return [
        other
        for other in pool.entries
        if other is not entry
        and (snapshot.in_use(other.id) or snapshot.shares(other.id))
        and any(set_name in sets for set_name, _, _ in other.consumes)
    ]


def pool_progress(snapshot: ClusterSnapshot, key: PoolKey) -> tuple[str, int, int] | None:
    """An incomplete pool's name, the slices of its newest generation published, and the slices announced."""
    pool = snapshot.pool(key)
    if pool is None or not pool.slices:
        return None
    return str(key), len(pool.slices), pool.slices[0].spec.pool.resource_slice_count


def _safe(selector: object, entry: DeviceEntry, device_view: DeviceView) -> bool:
    try:
        return evaluate(selector, entry, device_view)  # type: ignore[arg-type]
    except SelectorRuntimeError:
        return False


def _classify(
    spec: RequestSpec, d: RequestDiagnosis, pools: NodePools, counts: Counter[str]
) -> tuple[str, str]:
    if spec.all_mode and pools.incomplete:
        return "PoolIncomplete", f"asks for all devices, but pool {pools.incomplete[0]} is being updated"
    if spec.all_mode and pools.invalid:
        return "PoolInvalid", f"asks for all devices, but pool {pools.invalid[0][0]} is invalid"
    if d.request_kept == 0:
        if pools.incomplete:
            return "PoolIncomplete", f"no usable device; pool {pools.incomplete[0]} is being updated"
        if pools.invalid:
            return (
                "PoolInvalid",
                f"no usable device; pool {pools.invalid[0][0]} is invalid: {pools.invalid[0][1]}",
            )
        return "NoMatchingDevice", f"0 of {d.devices} devices match (class kept {d.class_kept})"
    if spec.all_mode and d.free < d.request_kept:
        reason = _BLOCKER_REASON[counts.most_common(1)[0][0]]
        return reason, f"asks for all {d.request_kept} matching devices, {d.request_kept - d.free} unusable"
    if not spec.all_mode and d.free < spec.need:
        if d.request_kept < spec.need:
            return "InsufficientDevices", f"needs {spec.need}, only {d.request_kept} match"
        reason = _BLOCKER_REASON[counts.most_common(1)[0][0]]
        return reason, f"needs {spec.need}, {d.request_kept} match, {d.free} usable"
    return "", ""


def constraint_conflict(
    d: RequestDiagnosis,
    spec: RequestSpec,
    misses: Sequence[ConstraintMiss],
    rejected: Mapping[str, int] | None = None,
    claims: Sequence[ClaimSpec] = (),
) -> RequestDiagnosis:
    """Turn a request that was fine alone into a ConstraintConflict diagnosis, or, without constraint misses,
    into what the requests of the pod competed for (shared counters, capacity, devices)."""
    miss = next((m for m in misses if m.spec is spec), None) or (misses[0] if misses else None)
    if miss is None:
        rejected = rejected or {}
        if rejected.get("counters"):
            d.reason = "CounterExhausted"
            d.message = "the requests together need more of the shared counters than are left"
        elif rejected.get("capacity"):
            d.reason = "InsufficientCapacity"
            d.message = "the requests together need more capacity than is left"
        else:
            d.reason = "InsufficientDevices"
            d.message = "the requests compete for the same devices"
        return d
    claim = claims[miss.claim_index] if miss.claim_index < len(claims) else None
    return describe_constraint(d, spec, miss.constraint, claim)


def describe_constraint(
    d: RequestDiagnosis, spec: RequestSpec, c: Constraint, claim: ClaimSpec | None = None
) -> RequestDiagnosis:
    """A ConstraintConflict diagnosis: the constraint, how many usable devices carry each value, and the most
    of the devices it needs (over every request it applies to) that any one value, or distinct values, give."""
    values: Counter[str] = Counter()
    for entry in spec.usable:
        v = entry.attributes.get(c.attribute)
        values["<missing>" if v is None else str(v[1])] += 1
    d.reason = "ConstraintConflict"
    d.constraint = c.describe()
    d.values = dict(values.most_common(8))
    best = max((n for v, n in values.items() if v != "<missing>"), default=0)
    d.shortfall = _shortfall(spec, c, claim)
    if d.shortfall.lists:
        best = d.shortfall.best
    if c.distinct:
        d.message = f"{c.describe()}: needs {spec.need} distinct values, {len(values)} available"
    else:
        d.message = f"{c.describe()}: needs {spec.need} devices sharing a value, best value has {best}"
    if d.shortfall.lists:
        d.message += f"; {LISTS_NOT_SETS}"
    return d


LISTS_NOT_SETS = (
    "Kubernetes 1.36 compares a list attribute with no other device's value (its kube-scheduler leaves "
    "DRAListTypeAttributes out of allocation; 1.37 compares lists as sets)"
)


def _shortfall(spec: RequestSpec, c: Constraint, claim: ClaimSpec | None) -> ConstraintShortfall:
    groups = [[s for s in g if c.applies(s.base, s.full)] for g in (claim.groups if claim else [[spec]])]
    groups = [g for g in groups if g] or [[spec]]
    need = sum(g[0].need for g in groups)
    by_value: dict[AttrValue, set[DeviceId]] = {}
    lists: set[DeviceId] = set()
    for group in groups:
        for s in group:
            for entry in s.usable:
                value = entry.attributes.get(c.attribute)
                if value is not None and not c.lists_as_sets and type(value[1]) is frozenset:
                    # a value of its own under matchAttribute; under distinctAttribute one list at most
                    lists.add(entry.id)
                    by_value.setdefault(("<list>", str(entry.id)), {entry.id})
                    continue
                for member in members(value) if value is not None else ():
                    by_value.setdefault(member, set()).add(entry.id)
    if c.distinct:
        best = min(need, len(by_value) - len(lists) + min(len(lists), 1))
    else:
        best = 0
        for devices in by_value.values():
            per_group = (
                max(min(s.need, sum(1 for e in s.usable if e.id in devices)) for s in g) for g in groups
            )
            best = max(best, min(sum(per_group), len(devices)))
    names = tuple(dict.fromkeys(g[0].base for g in groups))
    return ConstraintShortfall(c.attribute, c.distinct, names, need, best, len(lists))


def selector_failure(
    node: str,
    err: SelectorRuntimeError,
    claims: Sequence[ClaimSpec],
    pools: NodePools,
    failed: RequestSpec | None = None,
) -> Failure:
    """An InvalidSelector failure for a selector's runtime error on a device of ``node``: which request (or
    class) the selector belongs to (``failed``, else the first with that expression), the device, the error, and
    a hint (the attribute another domain has)."""
    spec = failed or next(
        (
            s
            for c in claims
            for g in c.groups
            for s in g
            if any(x.expression == err.expression for x in s.selectors)
        ),
        None,
    )
    cause = err.__cause__
    text = str(cause) if cause is not None else str(err)
    hint = str(getattr(cause, "hint", "") or "")
    if hint and text.endswith(f" (hint: {hint})"):
        text = text[: -len(f" (hint: {hint})")]
    d = RequestDiagnosis(
        claim=claims[spec.claim_index].key if spec is not None else "",
        request=spec.full if spec is not None else "",
        reason="InvalidSelector",
        message=text,
        error_device=err.device,
        error_hint=_other_domain(text, err.device, pools) or hint,
    )
    if spec is not None:
        own = any(x.expression == err.expression for x in spec.request_selectors)
        d.selectors = [SelectorStat("request" if own else f"class {spec.class_name}", err.expression, 1)]
    kube = kubeerrors.cel_runtime(d.claim, spec, err.expression, err.device, text)
    return Failure(node=node, reason="InvalidSelector", requests=[d], message=str(err),
                   pools_incomplete=[str(k) for k in pools.incomplete], aborts=kube)  # fmt: skip


def _other_domain(text: str, device: str, pools: NodePools) -> str:
    """For "no such key: name": where the device does publish an attribute of that name."""
    prefix = "no such key: "
    if not text.startswith(prefix):
        return ""
    name = text[len(prefix) :].strip()
    for entry in pools.visible or [e for _, es in pools.usable for e in es]:
        if str(entry.id) == device:
            domains = sorted(k.rsplit("/", 1)[0] for k in entry.attributes if k.rsplit("/", 1)[-1] == name)
            return f'the device has device.attributes["{domains[0]}"].{name}' if domains else ""
    return ""


def aggregate(failures: list[Failure], total: int) -> NodesFailure:
    by_reason: Counter[str] = Counter(f.reason for f in failures)
    return NodesFailure(total=total, failures=failures, by_reason=dict(by_reason))
