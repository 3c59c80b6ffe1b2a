"""The words of an explanation (pure): the first sentence names the nearest miss, the next ones the other near
nodes and choices, then one clause groups the nodes that never come close. The same ranking orders the per-node
detail and the closest devices, for ``gpudra explain`` and the web view.

Examples of first sentences (tests/golden/pending_claims.yaml has the full corpus):

- needs 9 NVIDIA H100 80GB HBM3 on one node; the most on any node is 8 (dgx-h100-0, dgx-h100-1)
- a matching NVIDIA H100 80GB HBM3 exists on dgx-h100-1 but is in use by default/train-3
- would fit on dgx-a100-0 if its MIG layout had a 3g.20gb free (the MIG planner can do this: GPU 0: ...)
- no GPU matches request gpu: 20 GPUs fail only '<selector>' (productName NVIDIA H100 80GB HBM3 on ...; ...)

Class selectors appear by class name; their CEL text only when the class is why nothing matches.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Mapping, Sequence

from gpudra.allocator.diagnosis import (
    LISTS_NOT_SETS,
    MATCHES,
    SELECTOR,
    DeviceMiss,
    Failure,
    NodesFailure,
    RequestDiagnosis,
    pool_progress,
)
from gpudra.allocator.explain.explanation import ClosestDevice, Explanation, NodeLine, Repartition
from gpudra.allocator.explain.nearest import (
    BROKEN,
    CLOSE,
    FAR,
    FREEABLE,
    REPUBLISHING,
    SHORT,
    UNEXAMINED,
    WAITS,
    Nearness,
    NodeMiss,
    by_request,
    rank,
)
from gpudra.allocator.explain.phrases import ABORTED, claim_level, claim_sentence, values_shown
from gpudra.allocator.pools import DeviceId, PoolKey
from gpudra.allocator.requests import CAPACITY, COUNTERS, IN_USE, TAINTED
from gpudra.allocator.snapshot import ClusterSnapshot
from gpudra.allocator.vocabulary import Kind, claims_phrase, common_kind, conjoin, counted, listed

CLOSEST_DEVICES = 20


def render_text(outcome: Failure | NodesFailure, limit: int = 1024) -> str:
    """The Event message for an outcome, without holders or planner (see :func:`explain_outcome`)."""
    return explain_outcome(outcome).text(limit)


def explain_outcome(
    outcome: Failure | NodesFailure,
    *,
    snapshot: ClusterSnapshot | None = None,
    holders: Mapping[DeviceId, str] | None = None,
    classes: Collection[str] = (),
    repartition: Repartition | None = None,
) -> Explanation:
    """Words for a failed allocation. ``holders`` names the claim holding each allocated device, ``classes``
    the cluster's DeviceClasses (for a class that does not exist), ``repartition`` the MIG planner's answer."""
    if isinstance(outcome, Failure) and claim_level(outcome):
        return Explanation(outcome.reason, claim_sentence(outcome, classes), (), (), (), outcome)
    failures = outcome.failures if isinstance(outcome, NodesFailure) else [outcome]
    total = outcome.total if isinstance(outcome, NodesFailure) else 1
    words = _Words(failures, dict(holders or {}), snapshot)
    if not words.ranked:
        headline = "no node publishes devices" if total == 0 else f"none of the {total} nodes was examined"
        return Explanation(outcome.reason or "NoMatchingDevice", headline, (), (), (), outcome)
    nearest = words.ranked[0]
    headline, sentences = words.write(total)
    if isinstance(outcome, Failure) and outcome.aborts:
        sentences.insert(0, ABORTED)
    if repartition is not None and repartition.node:
        headline, sentences = repartition.sentence(), [headline, *sentences]
    if repartition is not None and repartition.impossible:
        sentences.append(f"no MIG repartition satisfies it: {repartition.impossible}")
    return Explanation(
        reason=nearest.reason,
        headline=headline,
        sentences=tuple(sentences),
        nodes=tuple(words.line(m) for m in words.ranked),
        closest=words.closest(),
        outcome=outcome,
    )


class _Words:
    def __init__(
        self, failures: Sequence[Failure], holders: dict[DeviceId, str], snapshot: ClusterSnapshot | None
    ) -> None:
        self.ranked = rank(failures, holders)
        self.holders = holders
        self.snapshot = snapshot
        self.order = {m.node: i for i, m in enumerate(self.ranked)}
        self.given = {f.node: i for i, f in enumerate(failures) if f.node is not None}
        self.mentioned: set[str] = set()

    # ------------------------------------------------------------ sentences

    def write(self, total: int) -> tuple[str, list[str]]:
        nearest = self.ranked[0].nearness
        d = nearest.diagnosis
        if d is None:
            self.mentioned.add(nearest.node)
            if nearest.tier == REPUBLISHING:
                return self._pool(nearest.node, None), self._unexamined(total)
            return f"{nearest.node}: {self.ranked[0].failure.message}", self._unexamined(total)
        ranking = by_request(self.ranked, d.request, self.holders)
        headline = self._headline(ranking[0], ranking)
        choices = [r for r in self._requests() if r != d.request and r.split("/", 1)[0] == d.base]
        if choices:
            headline = f"no choice of request {d.base} fits; nearest, {d.request}: {headline}"
        sentences: list[str] = []
        for choice in choices:
            others = by_request(self.ranked, choice, self.holders)
            if others:
                sentences.append(f"{choice}: {self._headline(others[0], others, mention=False)}")
        sentences += self._others(ranking)
        sentences += self._far(ranking)
        sentences += self._unexamined(total)
        return headline, sentences

    def _requests(self) -> list[str]:
        return list(dict.fromkeys(d.request for m in self.ranked for d in m.failure.requests))

    def _headline(self, n: Nearness, ranking: list[Nearness], *, mention: bool = True) -> str:
        d = n.diagnosis
        assert d is not None
        tied = [o for o in ranking if o.key == n.key and _measure(o) == _measure(n)]
        if mention:
            self.mentioned.add(n.node)
        if n.tier == BROKEN:
            return self._broken(n.node, d)
        if n.tier == REPUBLISHING:
            return self._pool(n.node, d)
        if n.tier == SHORT and d.reason == "ConstraintConflict" and d.shortfall is not None:
            if mention:
                self.mentioned.update(o.node for o in tied)
            return self._constraint(d, [o.node for o in tied])
        if n.tier in (WAITS, SHORT) and _matching(n) >= n.need:
            return self._blocked(n, headline=True)
        if n.tier == SHORT:
            if mention:
                self.mentioned.update(o.node for o in tied)
            noun = self.noun(d.request)
            return (
                f"needs {n.need} {noun.noun(n.need)} on one node; the most on any node is {n.later} "
                f"({listed([o.node for o in tied])}{_short_note(n)})"
            )
        if n.tier == CLOSE:
            close = [o for o in ranking if o.tier == CLOSE]
            if mention:
                self.mentioned.update(o.node for o in close if o.key[1] == n.key[1])
            return self._close(d, close, n.key[1])
        return self._far_headline(d, ranking, mention)

    def noun(self, request: str) -> Kind:
        """What the request matches, as specifically as the cluster allows."""
        matching: list[Kind] = []
        near: list[Kind] = []
        for m in self.ranked:
            for d in m.failure.requests:
                if d.request == request:
                    for c in d.candidates:
                        (near if c.miss == SELECTOR else matching).append(c.kind)
        if matching:
            return common_kind(matching)
        return common_kind(near).generic() if near else Kind()

    def _broken(self, node: str, d: RequestDiagnosis) -> str:
        owner = d.selectors[0].source if d.selectors and d.selectors[0].source != "request" else None
        driver_pool_device = d.error_device.split("/")
        where = "/".join(driver_pool_device[1:]) if len(driver_pool_device) == 3 else d.error_device
        text = f"the selector of {owner or f'request {d.request}'} fails on {where or node}: {d.message}"
        return text + (f"; {d.error_hint}" if d.error_hint else "")

    def _pool(self, node: str, d: RequestDiagnosis | None) -> str:
        failure = self.ranked[self.order[node]].failure
        progress = d.pool_slices if d is not None else None
        if progress is None and failure.pools_incomplete and self.snapshot is not None:
            driver, _, pool = failure.pools_incomplete[0].partition("/")
            progress = pool_progress(self.snapshot, PoolKey(driver, pool))
        if progress is not None:
            name, have, want = progress
            return (
                f"{node} is republishing its devices (pool {name} has {have} of {want} slices); the claim waits "
                "until the pool is complete"
            )
        if failure.pools_incomplete:
            return f"{node} is republishing its devices (pool {failure.pools_incomplete[0]} is incomplete)"
        invalid = failure.pools_invalid[0] if failure.pools_invalid else (d.message if d else failure.message)
        return f"{node} publishes an invalid pool, which is skipped: {invalid}"

    def _constraint(self, d: RequestDiagnosis, nodes: list[str]) -> str:
        s = d.shortfall
        assert s is not None
        who = (
            f"request {s.requests[0]} needs"
            if len(s.requests) == 1
            else f"requests {conjoin(s.requests)} need"
        )
        noun = self.noun(d.request).noun(s.need)
        note = f"; {LISTS_NOT_SETS}" if s.lists else ""
        if s.distinct:
            return (
                f"{who} {s.need} {noun} with different {s.attribute}; the most different on any node is {s.best} "
                f"({listed(nodes)}){note}"
            )
        return (
            f"{who} {s.need} {noun} sharing one {s.attribute}; the most sharing one on any node is {s.best} "
            f"({listed(nodes)}){note}"
        )

    def _blocked(self, n: Nearness, *, headline: bool) -> str:
        d = n.diagnosis
        assert d is not None
        matching = [c for c in d.candidates if c.miss != SELECTOR]
        m = len(matching)
        if not headline:
            return f"{n.node} has {m} but {self._blockers(matching, single=False)}"
        noun = self.noun(d.request)
        if m == 1:
            return f"a matching {noun.noun(1)} exists on {n.node} but {self._blockers(matching, single=True)}"
        if n.need == 1:
            return f"{n.node} has {m} matching {noun.noun(m)} but {self._blockers(matching, single=False)}"
        return (
            f"needs {n.need} {noun.noun(n.need)} on one node; {n.node} has {m} but "
            f"{self._blockers(matching, single=False)}"
        )

    def _blockers(self, matching: list[DeviceMiss], *, single: bool) -> str:
        groups = [(m, [c for c in matching if c.miss == m]) for m in (IN_USE, COUNTERS, CAPACITY, TAINTED)]
        groups = [(m, g) for m, g in groups if g]
        held = {m: self._by(g) for m, g in groups if m != TAINTED}
        shared = len(held) > 1 and len(set(held.values())) == 1 and next(iter(held.values()))
        parts: list[str] = []
        for miss, group in groups:
            b = len(group)
            if single:
                subject, one = "", True
            elif b == len(matching) and b > 1:
                subject, one = "all ", False
            elif b == 1:
                subject, one = f"{group[0].device.device} ", True
            else:
                subject, one = f"{b} ", False
            by = "" if shared else held.get(miss, "")
            if miss == IN_USE:
                parts.append(f"{subject}{'is' if one else 'are'} in use{by}" + _also_tainted(group))
            elif miss == COUNTERS:
                kind = common_kind([c.blocker_kind for c in group if c.blocker_kind is not None])
                parts.append(f"{subject}{'overlaps' if one else 'overlap'} {kind.noun(2)} in use{by}")
            elif miss == CAPACITY:
                parts.append(f"{subject}{'has' if one else 'have'} too little capacity left{by}")
            else:
                taints = sorted({t for c in group for t in c.taints})
                parts.append(
                    f"{subject}{'is' if one else 'are'} tainted {listed(taints)}, which the request does not "
                    "tolerate"
                )
        if shared:  # the same claims hold both kinds: name them once
            freeable = [p for (m, _), p in zip(groups, parts, strict=True) if m != TAINTED]
            rest = [p for (m, _), p in zip(groups, parts, strict=True) if m == TAINTED]
            return " and ".join([" and ".join(freeable) + f", all held{shared}", *rest])
        return " and ".join(parts)

    def _by(self, group: list[DeviceMiss]) -> str:
        held: Counter[str] = Counter()
        for c in group:
            for who in {self.holders[b] for b in c.blocked_by if b in self.holders}:
                held[who] += 1
        if not held:
            return ""
        names = [who for who, _ in sorted(held.items(), key=lambda kv: (-kv[1], kv[0]))]
        return f" by {claims_phrase(names)}"

    def _close(self, d: RequestDiagnosis, close: list[Nearness], failed: int) -> str:
        noun = self.noun(d.request)
        devices = [
            (o.node, c)
            for o in close
            if o.diagnosis is not None
            for c in o.diagnosis.candidates
            if c.miss == SELECTOR and len(c.failed) == failed
        ]
        kinds = common_kind([c.kind for _, c in devices])
        count = f"{len(devices)} {kinds.noun(len(devices))}"
        head = f"no {noun.noun(1)} matches request {d.request}: "
        expressions = Counter(c.failed[0] for _, c in devices)
        expression = expressions.most_common(1)[0][0]
        if failed > 1:
            return head + f"the closest {count} fail {failed} of its selectors, e.g. '{expression}'"
        if len(expressions) > 1:
            return head + f"{count} fail one of its selectors each, most often '{expression}'"
        return head + f"{count} fail only '{expression}'" + values_shown([(node, c) for node, c in devices])

    def _far_headline(self, d: RequestDiagnosis, ranking: list[Nearness], mention: bool) -> str:
        noun = self.noun(d.request)
        own = next((s for s in d.selectors if s.expression == d.class_expression), None)
        if d.class_only and own:
            nodes = [
                o
                for o in ranking
                if o.tier == FAR
                and o.diagnosis is not None
                and o.diagnosis.class_expression == d.class_expression
            ]
            if mention:
                self.mentioned.update(o.node for o in nodes)
            left = sum(o.diagnosis.class_only for o in nodes if o.diagnosis is not None)
            every = all(
                o.diagnosis.class_only == o.diagnosis.devices for o in nodes if o.diagnosis is not None
            )
            kinds = sorted({k.summary() for o in nodes if o.diagnosis for k in o.diagnosis.class_left_out})
            return (
                f"no {noun.noun(1)} matches request {d.request}: {own.source} ('{own.expression}') leaves out "
                f"{'all ' if every else ''}{left} devices of {listed([o.node for o in nodes])} ({', '.join(kinds)})"
            )
        return f"no {noun.noun(1)} matches request {d.request} on any node"

    def _others(self, ranking: list[Nearness]) -> list[str]:
        out: list[str] = []
        short: dict[tuple[int, str], list[str]] = defaultdict(list)
        broken: list[str] = []
        for n in ranking:
            d = n.diagnosis
            if n.node in self.mentioned or d is None:
                continue
            if n.tier == BROKEN:
                broken.append(n.node)
            elif n.tier == REPUBLISHING:
                out.append(self._pool(n.node, d))
            elif n.tier in (WAITS, SHORT) and d.reason != "ConstraintConflict" and _matching(n) >= n.need:
                if len(out) < 3:
                    out.append(self._blocked(n, headline=False))
            elif n.tier == SHORT and d.reason != "ConstraintConflict":
                short[(n.later, _short_note(n))].append(n.node)
            elif n.tier == SHORT and d.shortfall is not None:
                short[(d.shortfall.best, "")].append(n.node)
            else:
                continue
            self.mentioned.add(n.node)
        if broken:
            out.append(
                f"the same error on {counted(len(broken), 'more node', 'more nodes')} ({listed(broken)})"
            )
        for (count, note), nodes in sorted(short.items(), key=lambda kv: -kv[0][0])[:3]:
            out.append(f"{listed(nodes)} {'has' if len(nodes) == 1 else 'have'} {count}{note}")
        return out

    def _far(self, ranking: list[Nearness]) -> list[str]:
        far = [n for n in ranking if n.tier in (CLOSE, FAR) and n.node not in self.mentioned]
        if not far:
            return []
        ordered = sorted(far, key=lambda n: self.given.get(n.node, 0))
        has: dict[str, list[str]] = {}
        kinds: set[Kind] = set()
        for n in ordered:
            d = n.diagnosis
            assert d is not None
            node_kinds = {c.kind for c in d.candidates if c.miss == SELECTOR} or set(d.class_left_out)
            kinds |= node_kinds
            summary = ", ".join(sorted({k.summary() for k in node_kinds})) or "no devices"
            has.setdefault(summary, []).append(n.node)
        noun = self.noun(ranking[0].diagnosis.request if ranking[0].diagnosis else "")
        if noun.specific and not any(k == noun for k in kinds):
            what = f"no {noun.noun(1)}"
        else:
            what = f"no matching {noun.generic().noun(1)}"
        other = "other " if self.mentioned else ""
        nodes = counted(len(ordered), f"{other}node has", f"{other}nodes have")
        groups = "; ".join(f"{summary} on {listed(names)}" for summary, names in has.items())
        return [f"{nodes} {what} ({groups})"]

    def _unexamined(self, total: int) -> list[str]:
        skipped = sum(
            1 for m in self.ranked if m.nearness.tier == UNEXAMINED and m.node not in self.mentioned
        )
        skipped += max(0, total - len(self.ranked))
        return [f"{counted(skipped, 'more node', 'more nodes')} not examined in detail"] if skipped else []

    # ------------------------------------------------------------ per node and per device

    def line(self, m: NodeMiss) -> NodeLine:
        n = m.nearness
        d = n.diagnosis
        if d is None and n.tier == REPUBLISHING:
            words = self._pool(m.node, None)
        elif d is None:
            words = m.failure.message or m.failure.reason
        elif n.tier == BROKEN:
            words = self._broken(m.node, d)
        elif n.tier == REPUBLISHING:
            words = self._pool(m.node, d)
        elif n.tier in (WAITS, SHORT) and d.reason != "ConstraintConflict" and _matching(n) >= n.need:
            words = self._blocked(n, headline=False)
        elif n.tier == SHORT and d.shortfall is not None:
            words = (
                f"the most sharing one {d.shortfall.attribute} is {d.shortfall.best} of {d.shortfall.need}"
            )
        elif n.tier == SHORT:
            words = f"has {n.later} of {n.need}{_short_note(n)}"
        elif n.tier == CLOSE:
            words = "no match; closest fail " + ", ".join(
                f"'{e}'" for e in sorted({c.failed[0] for c in d.candidates if c.miss == SELECTOR})[:2]
            )
        else:
            words = "nothing close: " + (
                ", ".join(sorted({k.summary() for k in d.class_left_out})) or "no devices"
            )
        return NodeLine(m.node, n.tier, m.reason, n.need, n.now, n.later, words)

    def closest(self) -> tuple[ClosestDevice, ...]:
        """Devices of the limiting request that miss something, node by node in ranking order, the least
        missing first (a device that matches and is free is no news)."""
        d0 = self.ranked[0].nearness.diagnosis
        out: list[ClosestDevice] = []
        for m in self.ranked:
            d = next((x for x in m.failure.requests if d0 is not None and x.request == d0.request), None)
            if d is None:
                continue
            for c in sorted(d.candidates, key=_severity):
                if c.miss == MATCHES:
                    continue
                out.append(ClosestDevice(m.node, c.device.device, c.kind.noun(1), self._miss(c)))
                if len(out) >= CLOSEST_DEVICES:
                    return tuple(out)
        return tuple(out)

    def _miss(self, c: DeviceMiss) -> str:
        by = self._by([c])
        if c.miss == IN_USE:
            return "in use" + by + (f"; tainted {', '.join(c.taints)}" if c.taints else "")
        if c.miss == COUNTERS:
            return "overlaps devices in use" + by
        if c.miss == CAPACITY:
            return "too little capacity left" + by
        if c.miss == TAINTED:
            return "tainted " + ", ".join(c.taints)
        more = f" and {len(c.failed) - 1} more selectors" if len(c.failed) > 1 else ""
        return f"fails '{c.failed[0]}'{more}"


def _also_tainted(in_use: list[DeviceMiss]) -> str:
    """The taints of devices in use: freeing them would not be enough."""
    tainted = [c for c in in_use if c.taints]
    if not tainted:
        return ""
    taints = listed(sorted({t for c in tainted for t in c.taints}))
    if len(tainted) == len(in_use):
        return f" and tainted {taints}, which the request does not tolerate"
    which = tainted[0].device.device if len(tainted) == 1 else str(len(tainted))
    return f" ({which} also tainted {taints}, which the request does not tolerate)"


def _matching(n: Nearness) -> int:
    d = n.diagnosis
    return sum(1 for c in d.candidates if c.miss != SELECTOR) if d is not None else 0


def _measure(n: Nearness) -> int:
    """What nodes tie on in a sentence: the most sharing one value, or the devices the node could give once
    claims end (its WHEN FREED count)."""
    d = n.diagnosis
    if d is not None and d.reason == "ConstraintConflict" and d.shortfall is not None:
        return d.shortfall.best
    return n.later


def _short_note(n: Nearness) -> str:
    """For a node that gives too few: how many of the devices it counts are in use now (its NOW count is the
    rest), and the matching devices it does not count because their taints are not tolerated."""
    d = n.diagnosis
    if d is None:
        return ""
    held = n.later - n.now
    tainted = sum(1 for c in d.candidates if c.miss == TAINTED)
    parts = [f"{held} of them in use"] if held else []
    parts += [f"{tainted} more tainted"] if tainted else []
    return f", {' and '.join(parts)}" if parts else ""


def _severity(c: DeviceMiss) -> int:
    if c.miss == MATCHES:
        return 0
    if c.miss in FREEABLE:
        return 1
    if c.miss == TAINTED:
        return 2
    return 2 + len(c.failed)
