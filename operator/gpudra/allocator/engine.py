"""The allocator's front door: allocate one pod's claims on one node, or find the first node that fits.

snapshot = ClusterSnapshot(slices)
allocator = Allocator(snapshot, classes, namespace_labels={"team-a": {...}})
outcome = allocator.allocate(NodeInfo("node-1"), [claim])
if isinstance(outcome, Allocation):
    allocator.commit(outcome)            # mark the devices allocated in the snapshot
else:
    print(render_text(outcome))          # Failure: reason codes and numbers
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain

from gpudra.allocator import celfacts, kubeerrors
from gpudra.allocator.cel.celast import Node
from gpudra.allocator.cel.celview import Schema
from gpudra.allocator.constraints import Constraint, build_constraints, lists_as_sets
from gpudra.allocator.diagnosis import (
    Failure,
    NodesFailure,
    RequestDiagnosis,
    aggregate,
    constraint_conflict,
    describe_constraint,
    diagnose,
    selector_failure,
)
from gpudra.allocator.kubeorder import AllocationAborted, KubeOrderSearch, SelectorFailed, needs_kube_order
from gpudra.allocator.pools import NodeInfo, PoolKey
from gpudra.allocator.requests import (
    ADMIN_ACCESS_LABEL,
    ClaimSpec,
    CompileSelector,
    DeviceView,
    RequestProblem,
    RequestSpec,
    Selector,
    SelectorRuntimeError,
    build_claim,
    claim_key,
    evaluate,
    fails_on,
    passes_all,
    select,
)
from gpudra.allocator.result import Allocation, build_results
from gpudra.allocator.search import BudgetExceeded, Search
from gpudra.allocator.snapshot import ClusterSnapshot, NodePools
from gpudra.api.dra import DeviceClass, ResourceClaim
from gpudra.errors import InvalidInputError

KUBE_FILTERS_ALL_BELOW = 100
"""kube-scheduler's minFeasibleNodesToFind: in a cluster of at most this many nodes it filters every node."""
DEFAULT_KUBE_MINOR = 37
"""The Kubernetes minor whose allocator is followed unless told (the newest the differential test checks)."""
DEFAULT_BUDGET = 200_000
"""Search steps per node before giving up with SearchLimit (Kubernetes bounds Filter by a 10 s timeout)."""


def _default_compile(expression: str) -> Selector:
    # imported on first use: the CEL evaluator (cel-expr-python) is costly to load and not every caller compiles
    from gpudra.allocator.cel.selectors import compile_selector

    return compile_selector(expression)


def _default_share_id() -> str:
    return str(uuid.uuid4())


class Allocator:
    """Structured allocation with Kubernetes' semantics over a :class:`ClusterSnapshot`."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        classes: Mapping[str, DeviceClass] | Iterable[DeviceClass],
        *,
        namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
        compile_selector: CompileSelector | None = None,
        device_view: DeviceView | None = None,
        share_id: Callable[[], str] | None = None,
        budget: int = DEFAULT_BUDGET,
        detail_nodes: int = 8,
        kube_minor: int = DEFAULT_KUBE_MINOR,
    ) -> None:
        """``kube_minor``: the Kubernetes minor version (of the cluster's API server) whose allocator to follow
        where versions differ: an ``All`` request meeting an incomplete or invalid pool aborts the attempt through
        1.37 (``kubeerrors.pool_error_aborts``); matchAttribute and distinctAttribute compare list attributes as
        sets from 1.37, as scalars in 1.36 (``constraints.lists_as_sets``)."""
        self.snapshot = snapshot
        if isinstance(classes, Mapping):
            self.classes: dict[str, DeviceClass] = dict(classes)
        else:
            self.classes = {c.metadata.name or "": c for c in classes}
        self.namespace_labels = dict(namespace_labels or {})
        self.compile_selector = compile_selector or _default_compile
        self._compiled: dict[str, Selector] = {}
        self._prepared: dict[tuple[bytes, str | None], ClaimSpec] = {}
        self.device_view = device_view
        self.share_id = share_id or _default_share_id
        self.budget = budget
        self.detail_nodes = detail_nodes
        self._pool_error_aborts = kubeerrors.pool_error_aborts(kube_minor)
        self.lists_as_sets = lists_as_sets(kube_minor)
        self._cluster_match: dict[tuple[int, tuple[str, ...]], int] = {}
        self._hints: dict[bytes, _Hint] = {}
        self._facts: dict[bytes, _ShapeFacts] = {}
        self._positions: tuple[Sequence[NodeInfo] | None, int, dict[str, int]] = (None, -1, {})
        self._order: tuple[int, list[NodeInfo]] = (-1, [])

    # ------------------------------------------------------------ one node

    def allocate(self, node: NodeInfo | str, claims: Sequence[ResourceClaim]) -> Allocation | Failure:
        """Allocate every claim of one pod on ``node``: all or nothing, Kubernetes' first solution."""
        node = node if isinstance(node, NodeInfo) else NodeInfo(node)
        prepared = self._prepare(claims)
        if isinstance(prepared, Failure):
            prepared.node = node.name
            return prepared
        return self._on_node(node, prepared, explain=True)

    def commit(self, allocation: Allocation) -> None:
        """Record a successful allocation in the snapshot (what writing status.allocation does)."""
        for claim in allocation.claims:
            if claim.taken is None:
                self.snapshot.mark_allocated(claim.result)
            else:
                for device in claim.taken:
                    self.snapshot.allocate_device(device)

    def _prepare(
        self, claims: Sequence[ResourceClaim], texts: Sequence[bytes] | None = None
    ) -> list[ClaimSpec] | Failure:
        """The claims' requests resolved and compiled. With ``texts`` (each claim's namespace and devices as
        JSON), a claim written like one prepared before takes its requests, as long as its classes are still
        the same objects."""
        specs: list[ClaimSpec] = []
        for i, claim in enumerate(claims):
            labels = self.namespace_labels.get(claim.metadata.namespace or "default")
            key = (texts[i], (labels or {}).get(ADMIN_ACCESS_LABEL)) if texts is not None else None
            known = self._prepared.get(key) if key is not None else None
            if known is not None and all(
                self.classes.get(s.class_name) is s.device_class for g in known.groups for s in g
            ):
                # The requests hold one node's state at a time, filled afresh for each node tried: a claim at the
                # same position of its pod uses them as they are, another gets its own.
                groups = known.groups
                if groups and groups[0][0].claim_index != i:
                    groups = [[s.fresh(i) for s in g] for g in groups]
                specs.append(ClaimSpec(claim, claim_key(claim), groups, known.first_available))
                continue
            try:
                spec = build_claim(i, claim, self.classes, self._compile, labels)
                build_constraints(claim.spec.devices.constraints)
                specs.append(spec)
                if key is not None:
                    if len(self._prepared) > 4096:
                        self._prepared.clear()
                    self._prepared[key] = spec
            except RequestProblem as problem:
                diag = RequestDiagnosis(claim=problem.claim, request=problem.request, reason=problem.reason,
                                        message=str(problem))  # fmt: skip
                return Failure(node=None, reason=problem.reason, requests=[diag], message=str(problem))
            except InvalidInputError as err:
                return Failure(node=None, reason="InvalidSelector", message=f"{claim_key(claim)}: {err}")
        return specs

    def _compile(self, expression: str) -> Selector:
        """``compile_selector``, remembered per expression (a compile error is raised again each time)."""
        selector = self._compiled.get(expression)
        if selector is None:
            if len(self._compiled) > 4096:
                self._compiled.clear()
            selector = self._compiled[expression] = self.compile_selector(expression)
        return selector

    def _on_node(self, node: NodeInfo, claims: list[ClaimSpec], *, explain: bool) -> Allocation | Failure:
        pools = self.snapshot.node_pools(node)
        specs = [s for c in claims for g in c.groups for s in g]
        for spec in specs:
            select(spec, pools, self.snapshot, self.device_view)
        setup = _all_mode_problem(node, claims, specs, pools, aborts=self._pool_error_aborts)
        if setup is not None:
            return setup
        constraints = [
            build_constraints(c.claim.spec.devices.constraints, lists_as_sets=self.lists_as_sets)
            for c in claims
        ]
        search: Search
        if needs_kube_order(claims, constraints):
            search = KubeOrderSearch(self.snapshot, claims, constraints, self.budget, pools)
        else:
            search = Search(self.snapshot, claims, constraints, self.budget, pools.views)
            if any(constraints):
                search.prune()
        try:
            found = search.run()
        except BudgetExceeded:
            return Failure(
                node=node.name,
                reason="SearchLimit",
                message=f"gave up after {search.steps} search steps; simplify the claim (fewer devices per "
                "request, tighter selectors) or split it",
                steps=search.steps,
            )
        except SelectorFailed as err:
            return selector_failure(node.name, err.error, claims, pools, err.spec)
        except AllocationAborted as err:
            return Failure(
                node=node.name, reason=err.reason, message=str(err), steps=search.steps, aborts=err.kube
            )
        if found:
            results = build_results(node.name, claims, search.picks, search.chosen, self.share_id)
            return Allocation(node=node.name, claims=results, steps=search.steps)
        if not explain:
            return Failure(node=node.name, reason="", steps=search.steps)
        return self._explain(node, claims, constraints, pools, search)

    def _explain(
        self,
        node: NodeInfo,
        claims: list[ClaimSpec],
        constraints: list[list[Constraint]],
        pools: NodePools,
        search: Search,
    ) -> Failure:
        hopeless: list[RequestDiagnosis] = []
        feasible: list[tuple[ClaimSpec, RequestSpec]] = []
        for claim_index, claim in enumerate(claims):
            for group in claim.groups:
                live = [s for s in group if not s.impossible]
                if live:
                    feasible.append((claim, live[0]))
                    continue
                for spec in group:
                    d = diagnose(spec, claim.key, pools, self.snapshot, self.device_view)
                    if not d.reason:
                        applying = [c for c in constraints[claim_index] if c.applies(spec.base, spec.full)]
                        if applying:
                            d = describe_constraint(d, spec, applying[0], claim)
                        else:
                            d = constraint_conflict(d, spec, search.misses, search.rejected, claims)
                    hopeless.append(d)
        requests = hopeless
        if not requests:
            involved = {id(m.spec) for m in search.misses}
            for claim, spec in feasible:
                if involved and id(spec) not in involved:
                    continue
                d = diagnose(spec, claim.key, pools, self.snapshot, self.device_view)
                requests.append(constraint_conflict(d, spec, search.misses, search.rejected, claims))
        reason = requests[0].reason if requests else "InsufficientDevices"
        return Failure(
            node=node.name,
            reason=reason,
            requests=requests,
            pools_incomplete=[str(k) for k in pools.incomplete],
            pools_invalid=[f"{k}: {why}" for k, why in pools.invalid],
            steps=search.steps,
        )

    # ------------------------------------------------------------ many nodes

    def find_node(
        self, claims: Sequence[ResourceClaim], nodes: Sequence[NodeInfo] | None = None
    ) -> Allocation | NodesFailure | Failure:
        """Try nodes in order (``nodes`` as given, else every node with node-local slices by name) and return
        the first allocation. Nodes with too few free devices are skipped without a search. A Failure (not per
        node) comes back for problems no node can fix (missing class, bad selector, adminAccess denied), and for
        an error of Kubernetes' allocator on a node (``Failure.aborts``: kube-scheduler aborts the attempt)."""
        texts = [_shape_text(c) for c in claims]
        prepared = self._prepare(claims, texts)
        if isinstance(prepared, Failure):
            return prepared
        order: Sequence[NodeInfo] = nodes if nodes is not None else self._default_order()
        shape = b"|".join(texts)
        facts = self._facts.get(shape)
        if facts is None:
            if len(self._facts) > 4096:
                self._facts.clear()
            facts = self._facts[shape] = _ShapeFacts(_min_devices(prepared), _shared_values(prepared))
        nowhere = None
        seen = facts.matched
        if (
            seen is None
            or seen[0] != self.snapshot.version
            or len(seen[1]) != len(prepared)
            or any(g is not c.groups for g, c in zip(seen[1], prepared, strict=False))
        ):
            nowhere = self._matches_nowhere(prepared)
            if nowhere is None:
                facts.matched = (self.snapshot.version, [c.groups for c in prepared])
        minimum, shared = facts.minimum, facts.shared
        first, start, known = self._hint(order, shape) if nowhere is None else ((), 0, None)
        if known is not None:
            return known
        outcome = self._scan(order, prepared, nowhere, minimum, shared, start, first)
        if isinstance(outcome, Allocation):
            # The pending positions before the one taken were tried in vain; it and those after it remain.
            at = self._index_of(order, outcome.node)
            error = (
                self._error_after(order, at, prepared, facts)
                if len(order) <= KUBE_FILTERS_ALL_BELOW
                else None
            )
            if error is not None:
                return error
            index = max(start, at)
            self._remember(shape, order, index, None, tuple(p for p in first if at <= p < index))
            return outcome
        if isinstance(outcome, Failure):
            return outcome  # Kubernetes' allocator errs: the attempt is aborted
        if start or first:
            outcome = self._scan(
                order, prepared, nowhere, minimum, shared, 0
            )  # full scan for complete explanations
        if nowhere is None and isinstance(outcome, NodesFailure):
            self._remember(shape, order, len(order), outcome)
        elif isinstance(outcome, NodesFailure):
            outcome.settled = all(
                self._cluster_matches(s) == 0 for c in prepared for g in c.groups for s in g
            )
        return outcome

    def _error_after(
        self, order: Sequence[NodeInfo], at: int, claims: list[ClaimSpec], facts: _ShapeFacts
    ) -> Failure | None:
        """The first error Kubernetes' allocator meets on a node after ``at`` (kube-scheduler filters every node
        of a small cluster, and aborts on an error wherever it comes from). Only nodes where a selector fails
        on a device, or with an ``All`` request, are searched."""
        groups = [c.groups for c in claims]
        known = facts.failing
        if (
            known is None
            or known[0] != self.snapshot.version
            or known[1] is not order
            or len(known[2]) != len(groups)
            or any(g is not h for g, h in zip(known[2], groups, strict=True))
        ):
            memo: dict[frozenset[Schema], bool] = {}
            names = frozenset(
                n.name
                for n in order
                if not self._never_fails(n.name, claims, memo) and self._may_abort(n, claims)
            )
            known = facts.failing = (self.snapshot.version, order, groups, names)
        if not known[3]:
            return None
        for node in order[at + 1 :]:
            if node.name not in known[3]:
                continue
            outcome = self._on_node(node, claims, explain=False)
            if isinstance(outcome, Failure) and outcome.aborts:
                return outcome
        return None

    def _may_abort(self, node: NodeInfo, claims: list[ClaimSpec]) -> bool:
        """Whether a selector of the claims fails on a device of the node (in use or not), or an ``All`` request
        may meet a problem there: the selection alone tells, without a search."""
        specs = [s for c in claims for g in c.groups for s in g]
        if any(s.all_mode for s in specs):
            return True
        pools = self.snapshot.node_pools(node)
        return any(fails_on(s, pools, self.snapshot, self.device_view) for s in specs)

    def _remember(
        self,
        shape: bytes,
        order: Sequence[NodeInfo],
        index: int,
        failure: NodesFailure | None,
        pending: tuple[int, ...] = (),
    ) -> None:
        if len(self._hints) > 4096:
            self._hints.clear()
        self._hints[shape] = _Hint(
            order, index, pending, self.snapshot.version, self.snapshot.freed_total, failure
        )

    def _index_of(self, order: Sequence[NodeInfo], node: str) -> int:
        return self._positions_for(order).get(node, 0)

    def _positions_for(self, order: Sequence[NodeInfo]) -> dict[str, int]:
        if self._positions[0] is not order or self._positions[1] != self.snapshot.version:
            self._positions = (order, self.snapshot.version, {n.name: i for i, n in enumerate(order)})
        return self._positions[2]

    def _default_order(self) -> list[NodeInfo]:
        if self._order[0] != self.snapshot.version:
            self._order = (self.snapshot.version, [NodeInfo(n) for n in self.snapshot.node_names()])
        return self._order[1]

    def _hint(
        self, order: Sequence[NodeInfo], shape: bytes
    ) -> tuple[tuple[int, ...], int, NodesFailure | None]:
        """Where a first-fit scan for this claim shape may look: the positions before the hint's index that got
        devices back (ascending), the index from which every node may take it, and the failure to answer when
        no node can have changed for the better. Allocating only ever removes options, so a node that could not
        take the shape still cannot until it gets a device back (or slices change)."""
        hint = self._hints.get(shape)
        if hint is None or hint.order is not order or hint.version != self.snapshot.version:
            return (), 0, None
        if hint.seen < self.snapshot.freed_dropped:
            return (), 0, None  # frees it has not seen were dropped from the log: look at every node
        freed = self.snapshot.freed[hint.seen - self.snapshot.freed_dropped :]
        if not freed:
            return hint.pending, hint.index, hint.failure
        positions = self._positions_for(order)
        back = {positions.get(n, -1) if n is not None else -1 for n in freed}
        if -1 in back:
            return (), 0, None  # a node the order does not name: look at every node
        pending = set(hint.pending)
        pending.update(p for p in back if p < hint.index)
        return tuple(sorted(pending)), hint.index, None

    def _scan(
        self,
        order: Sequence[NodeInfo],
        prepared: list[ClaimSpec],
        nowhere: RequestDiagnosis | None,
        minimum: int,
        shared: list[list[tuple[str, int]]],
        start: int,
        first: Sequence[int] = (),
    ) -> Allocation | NodesFailure | Failure:
        """First fit over the nodes at positions ``first``, then from ``start`` on (``minimum`` and ``shared``:
        ``_min_devices`` and ``_shared_values`` of the claims); a node's error that aborts the attempt in
        Kubernetes ends the scan with it."""
        failures: list[Failure] = []
        counts: dict[str, int] = {}
        detailed = 0
        memo: dict[frozenset[Schema], bool] = {}
        everywhere: str | None = None
        to_try = len(first) + len(order) - start
        for seen, index in enumerate(chain(first, range(start, len(order)))):
            node = order[index]
            if nowhere is not None:
                counts["NoMatchingDevice"] = counts.get("NoMatchingDevice", 0) + 1
                continue
            if detailed >= self.detail_nodes:
                if everywhere is None:
                    everywhere = self._fails_everywhere(prepared, shared, minimum, memo)
                if everywhere:
                    # What the loop below would say of each remaining node, said of them all at once.
                    counts[everywhere] = counts.get(everywhere, 0) + to_try - seen
                    break
            total, free, loose = self.snapshot.node_counts(node.name)
            if (
                shared
                and detailed >= self.detail_nodes
                and self._cannot_share(node.name, prepared, shared, memo)
            ):
                counts["Unexplained"] = counts.get("Unexplained", 0) + 1
                continue
            if not loose and free < minimum and (free == 0 or self._never_fails(node.name, prepared, memo)):
                # Kubernetes evaluates selectors only on free devices: with none, or none that could fail,
                # too few of them is all there is to say.
                reason = "InsufficientDevices" if total < minimum else "DevicesInUse"
                counts[reason] = counts.get(reason, 0) + 1
                if detailed < self.detail_nodes:
                    detailed += 1
                    message = f"needs {minimum} devices, {total} on node, {free} free"
                    failures.append(Failure(node=node.name, reason=reason, message=message))
                continue
            outcome = self._on_node(node, prepared, explain=detailed < self.detail_nodes)
            if isinstance(outcome, Allocation) or outcome.aborts:
                return outcome
            if outcome.reason:
                detailed += 1
                failures.append(outcome)
                counts[outcome.reason] = counts.get(outcome.reason, 0) + 1
            else:
                counts["Unexplained"] = counts.get("Unexplained", 0) + 1
        if nowhere is not None:
            failures.append(Failure(node=None, reason="NoMatchingDevice", requests=[nowhere],
                                    message="no device in the cluster matches"))  # fmt: skip
        if "Unexplained" in counts:
            # Nodes past the detail limit: count them under the most common explained reason.
            extra = counts.pop("Unexplained")
            top = max(counts.items(), key=lambda kv: kv[1])[0] if counts else "InsufficientDevices"
            counts[top] = counts.get(top, 0) + extra
        result = aggregate(failures, len(order))
        result.by_reason = counts
        return result

    def _fails_everywhere(
        self,
        claims: list[ClaimSpec],
        shared: list[list[tuple[str, int]]],
        minimum: int,
        memo: dict[frozenset[Schema], bool],
    ) -> str:
        """The count a node past the detail limit falls under when every node would ("Unexplained" when some
        request needs more devices sharing one value than any node has, "InsufficientDevices" when the claims
        need more devices than any node has), as the cluster's bounds tell; "" when they cannot tell."""
        bounds = self.snapshot.bounds()
        if bounds is None:
            return ""
        if any(all(need > bounds.shared.get(attribute, 0) for attribute, need in group) for group in shared):
            return "Unexplained" if self._safe_on(bounds.schemas, claims, memo) else ""
        if not shared and not bounds.multi and bounds.devices < minimum:
            return "InsufficientDevices" if self._safe_on(bounds.schemas, claims, memo) else ""
        return ""

    def _cannot_share(
        self,
        node: str,
        claims: list[ClaimSpec],
        shared: list[list[tuple[str, int]]],
        memo: dict[frozenset[Schema], bool],
    ) -> bool:
        """Whether some request needs more devices sharing one attribute value (matchAttribute) than the node
        has, in every alternative, and no selector could fail on the node's devices (Kubernetes would walk
        them all, and stop at such a failure)."""
        found = self.snapshot.node_shape(node)
        if found is None:
            return False
        most = found[0]
        if not any(all(need > most.get(attribute, 0) for attribute, need in group) for group in shared):
            return False
        return self._never_fails(node, claims, memo)

    def _never_fails(self, node: str, claims: list[ClaimSpec], memo: dict[frozenset[Schema], bool]) -> bool:
        """Whether no selector of the claims can fail at runtime on any device of the node, as the device index
        tells (False when it cannot tell). ``memo`` holds the answers per set of device schemas for one scan."""
        found = self.snapshot.node_shape(node)
        return found is not None and self._safe_on(found[1], claims, memo)

    def _safe_on(
        self, schemas: frozenset[Schema], claims: list[ClaimSpec], memo: dict[frozenset[Schema], bool]
    ) -> bool:
        """``_never_fails`` for devices of these schemas."""
        safe = memo.get(schemas)
        if safe is None:
            groups = self.snapshot.index.groups
            trees = [_trees(spec) for claim in claims for group in claim.groups for spec in group]
            safe = memo[schemas] = all(
                t is not None and (g := groups.get(schema)) is not None and celfacts.never_fails(t, g)
                for t in trees
                for schema in schemas
            )
        return safe

    def _matches_nowhere(self, claims: list[ClaimSpec]) -> RequestDiagnosis | None:
        """A request whose selectors match no device anywhere in the cluster (cached per snapshot version)."""
        for claim in claims:
            for group in claim.groups:
                if all(self._cluster_matches(s) == 0 for s in group):
                    spec = group[0]
                    return RequestDiagnosis(
                        claim=claim.key, request=spec.full, reason="NoMatchingDevice",
                        message=f"no device in the cluster passes the selectors of class {spec.class_name} "
                        "and the request",
                    )  # fmt: skip
        return None

    def _cluster_matches(self, spec: RequestSpec) -> int:
        key = (self.snapshot.version, spec.expressions)
        cached = self._cluster_match.get(key)
        if cached is not None:
            return cached
        if len(self._cluster_match) > 1024:
            self._cluster_match.clear()
        count = 0
        trees = _trees(spec)
        if trees is not None:
            self.snapshot.refresh()
            index = self.snapshot.index
            if not index.unviewed and all(celfacts.nothing_passes(trees, g) for g in index.groups.values()):
                self._cluster_match[key] = 0  # answered from the index, without visiting a device
                return 0
            if any(passes_all(spec, schema, index) for schema in index.groups):
                self._cluster_match[key] = 1  # every device of some group passes
                return 1
        for pool in self.snapshot.each_pool():
            for entry in pool.entries:
                try:
                    if all(evaluate(s, entry, self.device_view) for s in spec.selectors):
                        count += 1
                        break
                except SelectorRuntimeError:
                    count += 1  # let the per-node path report it
                    break
            if count:
                break
        self._cluster_match[key] = count
        return count


@dataclass(slots=True)
class _ShapeFacts:
    """What ``find_node`` knows of a claim shape (its claims' namespaces and devices) whatever the claims'
    names."""

    minimum: int
    """``_min_devices`` of the claims."""
    shared: list[list[tuple[str, int]]]
    """``_shared_values`` of the claims."""
    matched: tuple[int, list[list[list[RequestSpec]]]] | None = None
    """The snapshot version at which every request matched some device of the cluster, and the claims'
    prepared requests then: the answer holds while the slices (the version) and the requests (the same
    objects, so the same classes) stay."""
    failing: tuple[int, Sequence[NodeInfo], list[list[list[RequestSpec]]], frozenset[str]] | None = None
    """The nodes of an order where a selector of the claims fails on some device (or an ``All`` request may
    meet a problem), as of a snapshot version and the claims' prepared requests (see ``matched``)."""


@dataclass(slots=True)
class _Hint:
    """Where the last first-fit scan of a claim shape left off (see ``Allocator._hint``)."""

    order: Sequence[NodeInfo]
    index: int
    """Every node before it could not take the shape, except those at ``pending``."""
    pending: tuple[int, ...]
    """Positions before ``index`` that got devices back and were not tried since, ascending."""
    version: int
    seen: int
    """How many frees of the snapshot's log the hint has taken into account (``freed_total`` then)."""
    failure: NodesFailure | None


def _shape_text(claim: ResourceClaim) -> bytes:
    """The claim's namespace and devices as JSON: claims with the same text are allocated alike. (The model's
    serializer is called directly: model_dump_json's argument handling costs more than the serializing.)"""
    devices = claim.spec.devices
    return f"{claim.metadata.namespace}:".encode() + type(devices).__pydantic_serializer__.to_json(devices)


def _all_mode_problem(
    node: NodeInfo, claims: list[ClaimSpec], specs: list[RequestSpec], pools: NodePools, *, aborts: bool
) -> Failure | None:
    """What Kubernetes checks for every ``All`` request (firstAvailable alternatives included) before its
    search, failing the whole allocation at the first problem in its pool order: a pool of the node incomplete
    or invalid (an error that aborts the attempt when ``aborts``, else the node's failure), or a selector failing
    on a device."""
    for spec in specs:
        if not spec.all_mode:
            continue
        failing: dict[PoolKey, SelectorRuntimeError] = {}
        for entry, err in spec.failing.items():
            failing.setdefault(PoolKey(entry.id.driver, entry.id.pool), err)
        for key, why in _kube_pool_order(pools):
            if why is None and key in failing:
                return selector_failure(node.name, failing[key], claims, pools, spec)
            claim = claims[spec.claim_index].key
            if why == "":
                return Failure(
                    node=node.name,
                    reason="PoolIncomplete",
                    message=f"request {spec.full} asks for all devices, but pool {key} is being updated",
                    pools_incomplete=[str(k) for k in pools.incomplete],
                    aborts=kubeerrors.all_mode_pool(claim, spec, str(key), invalid=False) if aborts else "",
                )
            if why:
                return Failure(
                    node=node.name,
                    reason="PoolInvalid",
                    message=f"request {spec.full} asks for all devices, but pool {key} is invalid: {why}",
                    pools_invalid=[f"{k}: {w}" for k, w in pools.invalid],
                    aborts=kubeerrors.all_mode_pool(claim, spec, str(key), invalid=True) if aborts else "",
                )
    return None


def _kube_pool_order(pools: NodePools) -> list[tuple[PoolKey, str | None]]:
    """The node's pools in Kubernetes' order (by driver and name, usable pools with binding conditions last),
    each with None when usable, "" when incomplete, or why it is invalid."""
    first: list[tuple[PoolKey, str | None]] = [(k, "") for k in pools.incomplete]
    first += [(k, why) for k, why in pools.invalid]
    first += [(v.key, None) for v, _ in pools.usable if not v.has_binding_conditions]
    last = [(v.key, None) for v, _ in pools.usable if v.has_binding_conditions]
    return sorted(first) + last


def _trees(spec: RequestSpec) -> list[Node] | None:
    """The syntax trees of the request's selectors when every one is translated (``celfacts`` can read them)."""
    trees = [getattr(s, "tree", None) for s in spec.selectors]
    return None if any(t is None for t in trees) else [t for t in trees if t is not None]


def _shared_values(claims: list[ClaimSpec]) -> list[list[tuple[str, int]]]:
    """Per request under a matchAttribute constraint: for each alternative, the attribute and how many devices
    must share one value of it (an alternative without such a constraint makes the request unbounded)."""
    bounds: list[list[tuple[str, int]]] = []
    for claim in claims:
        constraints = [c for c in build_constraints(claim.claim.spec.devices.constraints) if not c.distinct]
        for group in claim.groups:
            needs: list[tuple[str, int]] = []
            for spec in group:
                applying = [c for c in constraints if c.applies(spec.base, spec.full)]
                if spec.all_mode or not applying:
                    break
                needs.append((applying[0].attribute, spec.count))
            else:
                bounds.append(needs)
    return bounds


def _min_devices(claims: list[ClaimSpec]) -> int:
    total = 0
    for claim in claims:
        for group in claim.groups:
            total += min((s.count if not s.admin and not s.all_mode else 0) for s in group)
    return total


__all__ = ["Allocation", "Allocator", "Failure", "NodePools", "NodesFailure"]
