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

from gpudra.allocator.constraints import Constraint
from gpudra.allocator.pools import DeviceEntry
from gpudra.allocator.requests import (
    CAPACITY,
    COUNTERS,
    IN_USE,
    TAINTED,
    DeviceView,
    RequestSpec,
    SelectorRuntimeError,
    blocker,
    evaluate,
)
from gpudra.allocator.search import ConstraintMiss
from gpudra.allocator.snapshot import ClusterSnapshot, NodePools

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

_SHORT = {
    "NoMatchingDevice": "no matching device",
    "InsufficientDevices": "too few matching devices",
    "DevicesInUse": "matching devices in use",
    "Tainted": "matching devices tainted",
    "CounterExhausted": "shared counters exhausted",
    "InsufficientCapacity": "not enough capacity left",
    "ConstraintConflict": "constraint cannot be met",
    "PoolIncomplete": "pool incomplete",
    "PoolInvalid": "pool invalid",
    "InvalidSelector": "selector error",
    "ClassNotFound": "DeviceClass not found",
    "AdminAccessDenied": "adminAccess denied",
    "SearchLimit": "search limit reached",
}

_BLOCKER_REASON = {IN_USE: "DevicesInUse", TAINTED: "Tainted", COUNTERS: "CounterExhausted",
                   CAPACITY: "InsufficientCapacity"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class SelectorStat:
    """How many of the node's devices one selector eliminated."""

    source: str  # "class <name>" or "request"
    expression: str
    eliminated: int


@dataclass(frozen=True, slots=True)
class NearMiss:
    """A device that failed exactly one selector."""

    device: str
    expression: str


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
    near_misses: list[NearMiss] = field(default_factory=list)
    constraint: str | None = None
    values: dict[str, int] = field(default_factory=dict)


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

    @property
    def ok(self) -> bool:
        return False


@dataclass(slots=True)
class NodesFailure:
    """No node fits: the per-node failures and how many nodes failed for each reason."""

    total: int
    failures: list[Failure]
    by_reason: dict[str, int]

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
    """Count what happened to every device of the node for this request."""
    entries = [e for _, es in node_pools.usable for e in es]
    d = RequestDiagnosis(claim=claim, request=spec.full, reason="", devices=len(entries))
    named = [(f"class {spec.class_name}", s) for s in spec.class_selectors] + [
        ("request", s) for s in spec.request_selectors
    ]
    eliminated = [0] * len(named)
    near: list[NearMiss] = []
    for entry in entries:
        failed = [i for i, (_, s) in enumerate(named) if not _safe(s, entry, device_view)]
        for i in failed:
            eliminated[i] += 1
        if not any(i < len(spec.class_selectors) for i in failed):
            d.class_kept += 1
        if len(failed) == 1 and len(near) < 3:
            near.append(NearMiss(str(entry.id), named[failed[0]][1].expression))
    d.selectors = [
        SelectorStat(src, s.expression, n) for (src, s), n in zip(named, eliminated, strict=True) if n
    ]
    d.near_misses = near
    d.request_kept = len(spec.selected)
    d.needed = spec.need if not spec.all_mode else max(spec.need, 1)
    counts: Counter[str] = Counter()
    for entry in spec.selected:
        b = blocker(spec, entry, snapshot)
        if b is None:
            d.free += 1
        else:
            counts[b] += 1
    d.in_use, d.tainted = counts[IN_USE], counts[TAINTED]
    d.counters_exhausted, d.capacity_short = counts[COUNTERS], counts[CAPACITY]
    d.reason, d.message = _classify(spec, d, node_pools, counts)
    return d


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
    return describe_constraint(d, spec, miss.constraint)


def describe_constraint(d: RequestDiagnosis, spec: RequestSpec, c: Constraint) -> RequestDiagnosis:
    """A ConstraintConflict diagnosis: the constraint and how many usable devices carry each value."""
    values: Counter[str] = Counter()
    for entry in spec.usable:
        v = entry.attributes.get(c.attribute)
        values["<missing>" if v is None else str(v[1])] += 1
    d.reason = "ConstraintConflict"
    d.constraint = c.describe()
    d.values = dict(values.most_common(8))
    best = max((n for v, n in values.items() if v != "<missing>"), default=0)
    if c.distinct:
        d.message = f"{c.describe()}: needs {spec.need} distinct values, {len(values)} available"
    else:
        d.message = f"{c.describe()}: needs {spec.need} devices sharing a value, best value has {best}"
    return d


# ---------------------------------------------------------------- text


def render_text(failure: Failure | NodesFailure, limit: int = 1024) -> str:
    """A concise human message (what an Event would say), at most ``limit`` bytes."""
    if isinstance(failure, NodesFailure):
        parts = [
            f"{n} {_SHORT.get(r, r)}" for r, n in sorted(failure.by_reason.items(), key=lambda kv: -kv[1])
        ]
        text = f"0/{failure.total} nodes can allocate: " + ", ".join(parts)
        detail = next((f for f in failure.failures if f.requests), None)
        if detail is not None:
            text += ". e.g. " + (f"{detail.node}: " if detail.node else "") + _failure_line(detail)
        return _cut(text, limit)
    where = f"node {failure.node}: " if failure.node else ""
    return _cut(where + _failure_line(failure), limit)


def _failure_line(failure: Failure) -> str:
    if not failure.requests:
        return f"{failure.reason}: {failure.message}"
    lines = []
    for d in failure.requests:
        line = f"{d.claim} request {d.request}: {d.reason}"
        if d.message:
            line += f" ({d.message})"
        nums = []
        if d.devices and d.reason not in ("ClassNotFound", "AdminAccessDenied", "InvalidSelector"):
            nums.append(f"devices {d.devices}, class kept {d.class_kept}, request kept {d.request_kept}")
            nums.append(f"free {d.free}")
        if d.in_use:
            nums.append(f"in use {d.in_use}")
        if d.tainted:
            nums.append(f"tainted {d.tainted}")
        if d.counters_exhausted:
            nums.append(f"counters exhausted {d.counters_exhausted}")
        if d.capacity_short:
            nums.append(f"capacity short {d.capacity_short}")
        if nums:
            line += "; " + ", ".join(nums)
        if d.reason == "NoMatchingDevice" and d.selectors:
            worst = max(d.selectors, key=lambda s: s.eliminated)
            line += f"; {worst.source} selector {worst.expression!r} eliminated {worst.eliminated}"
        if d.near_misses:
            line += "; closest: " + ", ".join(
                f"{m.device} (fails {m.expression!r})" for m in d.near_misses[:2]
            )
        if d.values:
            line += "; values: " + ", ".join(f"{v}={n}" for v, n in d.values.items())
        lines.append(line)
    return "; ".join(lines)


def _cut(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode(errors="ignore") + "..."


def aggregate(failures: list[Failure], total: int) -> NodesFailure:
    by_reason: Counter[str] = Counter(f.reason for f in failures)
    return NodesFailure(total=total, failures=failures, by_reason=dict(by_reason))
