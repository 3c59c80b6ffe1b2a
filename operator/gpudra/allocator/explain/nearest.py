"""How near each node comes to holding a pending claim, nearest first (pure).

A request on a node is placed in a tier, then ordered inside it:

====  ===================  ======================================================================================
tier  name                 order inside the tier
====  ===================  ======================================================================================
1     BROKEN               a selector fails at runtime on the node's devices (the claim must be fixed)
2     GAVE_UP              the search ran out of steps
3     WAITS                fits once current claims end: fewest devices to free, then fewest claims to end
4     REPUBLISHING         a pool of the node is incomplete or invalid
5     SHORT                gives some of the devices: fewest missing; taints before too few before constraints
6     CLOSE                no device matches, some fail only request selectors: fewest failed selectors, most such
7     FAR                  nothing comes close (the class leaves every device out, or the node has none)
8     UNEXAMINED           not examined in detail (the scan skipped it on counts alone)
====  ===================  ======================================================================================

A node's place is that of its limiting request: for each request the nearest of its firstAvailable choices, and
of those requests the farthest. :func:`examine` makes sure the nodes most likely to come near have per-device
detail before ranking.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpudra.allocator.diagnosis import MATCHES, SELECTOR, DeviceMiss, Failure, NodesFailure, RequestDiagnosis
from gpudra.allocator.engine import Allocator
from gpudra.allocator.pools import DeviceEntry, DeviceId, NodeInfo
from gpudra.allocator.requests import (
    CAPACITY,
    COUNTERS,
    IN_USE,
    TAINTED,
    RequestSpec,
    Selector,
    SelectorRuntimeError,
    build_claim,
    evaluate,
    spec_json,
)
from gpudra.api.dra import ResourceClaim
from gpudra.errors import GpudraError

BROKEN, GAVE_UP, WAITS, REPUBLISHING, SHORT, CLOSE, FAR, UNEXAMINED = range(1, 9)
FREEABLE = (IN_USE, COUNTERS, CAPACITY)
_SHORT_ORDER = {"Tainted": 0, "InsufficientDevices": 1, "ConstraintConflict": 2}
Key = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class Nearness:
    """How near one request (or firstAvailable choice) comes on one node."""

    node: str
    diagnosis: RequestDiagnosis | None
    key: Key
    need: int = 0
    now: int = 0
    """Devices of those it needs that the node could give now."""
    later: int = 0
    """...and once the claims holding matching devices end."""

    @property
    def tier(self) -> int:
        return self.key[0]


@dataclass(frozen=True, slots=True)
class NodeMiss:
    """One node's place: its limiting request's nearness, and the node's whole failure (per-node detail)."""

    nearness: Nearness
    failure: Failure

    @property
    def node(self) -> str:
        return self.nearness.node

    @property
    def reason(self) -> str:
        d = self.nearness.diagnosis
        return d.reason if d is not None else self.failure.reason


def claims_to_end(diagnosis: RequestDiagnosis, devices: int, holders: Mapping[DeviceId, str]) -> int:
    """The fewest claims whose end frees ``devices`` of the request's blocked devices (greedy, biggest first)."""
    held: Counter[str] = Counter()
    for c in diagnosis.candidates:
        if _freeable(c):
            for who in {holders.get(b, str(b)) for b in c.blocked_by} or {str(c.device)}:
                held[who] += 1
    freed = ended = 0
    for _, n in held.most_common():
        if freed >= devices:
            break
        freed += n
        ended += 1
    return ended


def nearness(node: str, d: RequestDiagnosis, holders: Mapping[DeviceId, str]) -> Nearness:
    need = max(d.needed, 1)
    if d.reason == "InvalidSelector":
        return Nearness(node, d, (BROKEN, 0, 0), need)
    if d.reason in ("PoolIncomplete", "PoolInvalid"):
        return Nearness(node, d, (REPUBLISHING, 0, 0), need)
    if d.reason == "ConstraintConflict" and d.shortfall is not None:
        s = d.shortfall
        return Nearness(node, d, (SHORT, s.need - s.best, _SHORT_ORDER[d.reason]), s.need, s.best, s.best)
    matching = [c for c in d.candidates if c.miss != SELECTOR]
    if not matching:
        near = [len(c.failed) for c in d.candidates if c.miss == SELECTOR]
        if near:
            return Nearness(node, d, (CLOSE, min(near), -near.count(min(near))), need)
        return Nearness(node, d, (FAR, 0, 0), need)
    now = min(need, sum(1 for c in matching if c.miss == MATCHES))
    later = min(need, sum(1 for c in matching if c.miss == MATCHES or _freeable(c)))
    if later >= need and now < need:
        return Nearness(node, d, (WAITS, need - now, claims_to_end(d, need - now, holders)), need, now, later)
    order = _SHORT_ORDER["Tainted"] if any(c.miss == TAINTED for c in matching) else 1
    return Nearness(node, d, (SHORT, need - later, order), need, now, later)


def _freeable(c: DeviceMiss) -> bool:
    """Usable once the claims holding it end: held, and not also tainted against the request."""
    return c.miss in FREEABLE and not c.taints


def _failure_key(failure: Failure) -> Key:
    tier = {"InvalidSelector": BROKEN, "SearchLimit": GAVE_UP, "PoolIncomplete": REPUBLISHING,
            "PoolInvalid": REPUBLISHING}.get(failure.reason, UNEXAMINED)  # fmt: skip
    return (tier, 0, 0)


def limiting(node: str, failure: Failure, holders: Mapping[DeviceId, str]) -> Nearness:
    """The node's place: per request the nearest choice, and the farthest of those."""
    if not failure.requests:
        return Nearness(node, None, _failure_key(failure))
    best: dict[str, Nearness] = {}
    for d in failure.requests:
        n = nearness(node, d, holders)
        if d.base not in best or n.key < best[d.base].key:
            best[d.base] = n
    return max(best.values(), key=lambda n: n.key)


def rank(failures: Sequence[Failure], holders: Mapping[DeviceId, str] | None = None) -> list[NodeMiss]:
    """Every node's failure, nearest first: within a place, the node that could give more now first (other ties
    keep the given order)."""
    held = holders or {}
    misses = [NodeMiss(limiting(f.node, f, held), f) for f in failures if f.node is not None]
    return sorted(misses, key=lambda m: (m.nearness.key, -m.nearness.now))


def by_request(ranked: Sequence[NodeMiss], request: str, holders: Mapping[DeviceId, str]) -> list[Nearness]:
    """How near one request (or choice) comes on each node, nearest first."""
    out: list[Nearness] = []
    for m in ranked:
        for d in m.failure.requests:
            if d.request == request:
                out.append(nearness(m.node, d, holders))
    return sorted(out, key=lambda n: n.key)


# ---------------------------------------------------------------- detail


def examine(
    outcome: NodesFailure,
    claims: Sequence[ResourceClaim],
    nodes: Sequence[NodeInfo],
    allocator: Allocator,
    limit: int = 16,
) -> NodesFailure:
    """The outcome with per-device detail for up to ``limit`` nodes: those the scan examined, then the nodes
    whose devices promise the most (free matching devices, matching devices, devices the classes keep; the scan
    skips nodes on device counts alone). The counts per reason stay."""
    detailed = {f.node: f for f in outcome.failures if f.node is not None and _detailed(f)}
    rest = [n for n in nodes if n.name not in detailed]
    if len(rest) > limit - len(detailed):
        promise = _Promise(allocator, claims)
        rest.sort(key=promise)
    for node in rest[: max(0, limit - len(detailed))]:
        again = allocator.allocate(node, claims)
        if isinstance(again, Failure):
            detailed[node.name] = again
    failures = [detailed[n.name] for n in nodes if n.name in detailed]
    failures += [f for f in outcome.failures if f.node is None]
    return NodesFailure(
        total=outcome.total, failures=failures, by_reason=dict(outcome.by_reason), settled=outcome.settled
    )


Matching = tuple[tuple[tuple[int, tuple[DeviceId, ...], int], ...], ...]
"""Per request group, per choice: (devices needed, the node's devices passing every selector, how many pass the
class's selectors)."""
_MEMO_LIMIT = 200_000
Memo = dict[tuple[object, str], tuple[int, NodeInfo, Matching, tuple[int, int, int] | None]]
_memos: weakref.WeakKeyDictionary[Allocator, Memo] = weakref.WeakKeyDictionary()
"""Per allocator, what each claim shape's selectors pass on each node, valid while the snapshot's slices are
unchanged (its ``version``): a controller explains claims of the same shape over the same nodes round after round,
and at 1,000 nodes the selector passes were most of an explanation's time. Which devices are in use is looked up
each time."""


class _Promise:
    """A node's sort key for examination: most free matching devices first, then matching ones, then the ones
    the classes keep (capped at what each request needs). Selector outcomes come from the devices' caches."""

    def __init__(self, allocator: Allocator, claims: Sequence[ResourceClaim]) -> None:
        self.allocator = allocator
        self.groups: list[list[RequestSpec]] = []
        shape: list[object] = []
        for i, claim in enumerate(claims):
            namespace = claim.metadata.namespace or "default"
            labels = allocator.namespace_labels.get(namespace)
            try:
                spec = build_claim(i, claim, allocator.classes, allocator.compile_selector, labels)
            except GpudraError:
                continue
            self.groups += spec.groups
            shape.append((namespace, tuple(sorted((labels or {}).items())), spec_json(claim)))
        self.shape = tuple(shape)
        self.memo = _memos.setdefault(allocator, {})
        if len(self.memo) > _MEMO_LIMIT:
            self.memo.clear()

    def __call__(self, node: NodeInfo) -> tuple[int, int, int]:
        in_use = self.allocator.snapshot.in_use
        free = matching = kept = 0
        groups, fixed = self._matching(node)
        if fixed is not None:
            return fixed
        for group in groups:
            best = (0, 0, 0)
            for need, fitting, passing in group:
                idle = sum(1 for device in fitting if not in_use(device))
                best = max(best, (min(idle, need), min(len(fitting), need), min(passing, need)))
            free, matching, kept = free + best[0], matching + best[1], kept + best[2]
        return -free, -matching, -kept

    def _matching(self, node: NodeInfo) -> tuple[Matching, tuple[int, int, int] | None]:
        """What the selectors pass on the node, and its key when no device passes them all (then which devices
        are in use does not matter)."""
        version = self.allocator.snapshot.version
        key = (self.shape, node.name)
        known = self.memo.get(key)
        if known is not None and known[0] == version and (known[1] is node or known[1] == node):
            return known[2], known[3]
        entries = [e for _, es in self.allocator.snapshot.node_pools(node).usable for e in es]
        groups = []
        for group in self.groups:
            choices = []
            for spec in group:
                passing = [e for e in entries if self._passes(spec.class_selectors, e)]
                fitting = tuple(e.id for e in passing if self._passes(spec.request_selectors, e))
                choices.append((max(spec.count, 1), fitting, len(passing)))
            groups.append(tuple(choices))
        matching = tuple(groups)
        fixed = None
        if not any(fitting for group in matching for _, fitting, _ in group):
            kept = sum(
                max((min(passing, need) for need, _, passing in group), default=0) for group in matching
            )
            fixed = (0, 0, -kept)
        self.memo[key] = (version, node, matching, fixed)
        return matching, fixed

    def _passes(self, selectors: Sequence[Selector], entry: DeviceEntry) -> bool:
        try:
            for selector in selectors:
                if not evaluate(selector, entry, self.allocator.device_view):
                    return False
        except SelectorRuntimeError:
            pass  # the node's detail reports it
        return True


def _detailed(failure: Failure) -> bool:
    return bool(failure.requests) or _failure_key(failure)[0] != UNEXAMINED
