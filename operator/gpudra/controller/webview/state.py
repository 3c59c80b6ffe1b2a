"""The web view's live state: informers over what it shows, and its fragments rebuilt when they change.

Each fragment (a node, a pending claim, a namespace of claims, a ComputeDomain, a MigLayout) is drawn again only
when the objects it is drawn from change (their resourceVersions are its signature), so a change on one node of a
500-node fleet redraws one card. A new version of the page is the set of fragments that differ from the last one
(and a section's order when fragments come or go); every subscriber gets it as one update.

Pending claims are explained as ``gpudra explain`` does (the allocator over every published slice, node by node,
plus the MIG planner's repartition), in a worker process and at most every ``explain_interval`` seconds while the
cluster keeps changing: that is the costly part on a large fleet.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar, cast

from gpudra.allocator.result import Allocation
from gpudra.api.base import WireModel
from gpudra.api.computedomain import ComputeDomain, ComputeDomainClique
from gpudra.api.core import Namespace, Node
from gpudra.api.dra import DeviceClass, ResourceClaim, ResourceSlice
from gpudra.api.meta import KubeObject
from gpudra.api.miglayout import MigLayout
from gpudra.controller.explaining import explain, explanation, view_from_wire
from gpudra.controller.miglayouts import MIGLAYOUTS
from gpudra.controller.webview import html
from gpudra.errors import GpudraError, NotFoundError
from gpudra.hardware.catalog import Catalog, load_catalog
from gpudra.kube.client import KubeClient
from gpudra.kube.informer import Informer, Key, Parse
from gpudra.kube.resources import (
    COMPUTE_DOMAIN_CLIQUES,
    COMPUTE_DOMAINS,
    DEVICE_CLASSES,
    NAMESPACES,
    NODES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    Resource,
)
from gpudra.mig.demand import DemandPlan
from gpudra.planning.fleetview import NodeCard, node_card
from gpudra.planning.migdemand import plan_pending
from gpudra.planning.summaries import allocated_devices
from gpudra.planning.workloads import (
    ClaimRow,
    PendingCard,
    claims_by_namespace,
    domain_card,
    layout_card,
    pending_card,
)
from gpudra.telemetry import get_logger

log = get_logger(__name__)

Body = dict[str, Any]
M = TypeVar("M", bound=WireModel)
Sections = dict[str, dict[str, str]]

WATCHED: dict[str, tuple[Resource, Parse]] = {
    "nodes": (NODES, Node.model_validate),
    "slices": (RESOURCE_SLICES, ResourceSlice.model_validate),
    "claims": (RESOURCE_CLAIMS, ResourceClaim.model_validate),
    "classes": (DEVICE_CLASSES, DeviceClass.model_validate),
    "namespaces": (NAMESPACES, Namespace.model_validate),
    "domains": (COMPUTE_DOMAINS, ComputeDomain.model_validate),
    "cliques": (COMPUTE_DOMAIN_CLIQUES, ComputeDomainClique.model_validate),
    "layouts": (MIGLAYOUTS, MigLayout.model_validate),
}
"""What the view watches, each with the model an object must parse as (one that does not is left out, as absent)."""
EXPLAINED_FROM = frozenset({"nodes", "slices", "claims", "classes", "namespaces"})
OPTIONAL = frozenset({"domains", "cliques", "layouts"})
IN_DRIVER_NAMESPACE = frozenset({"cliques"})
"""Watched in the driver's namespace only, where they live and the controller's Role lets it read them."""
"""Custom resources a cluster may not serve (CRDs not installed): their sections stay empty meanwhile."""
OPTIONAL_RETRY_SECONDS = 60.0


def _rv(obj: Body) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion", ""))


def _signature(obj: KubeObject) -> tuple[str, str]:
    return obj.metadata.name or "", obj.metadata.resource_version or ""


def explain_pending(
    objects: Mapping[str, list[Body]], pending: list[Body], driver: str, limit: int
) -> dict[str, PendingCard]:
    """Pure (and slow on large fleets): claim uid -> its card, for the oldest ``limit`` pending claims, explained
    as ``gpudra explain`` and the controller's Events do (the MIG planner serving them together). Runs in the
    worker process, which is sent wire objects."""
    view = view_from_wire(
        objects["slices"], objects["classes"], objects["claims"], objects["namespaces"], objects["nodes"]
    )
    claims = [ResourceClaim.model_validate(c) for c in pending]
    oldest = sorted(claims, key=lambda c: (c.metadata.creation_timestamp or "", c.metadata.namespaced_name))
    oldest = oldest[:limit]
    try:
        plan: DemandPlan | None = plan_pending(view.allocator, oldest, driver)
    except GpudraError as exc:
        log.warning("the MIG planner failed for the web view", error=str(exc))
        plan = None
    cards: dict[str, PendingCard] = {}
    for claim in oldest:
        outcome = explain(view, claim)
        said = outcome.node if isinstance(outcome, Allocation) else explanation(view, claim, outcome, plan)
        cards[claim.metadata.uid or ""] = pending_card(claim, said)
    return cards


def _draw_namespace(namespace: str, rows: list[ClaimRow]) -> tuple[str, None]:
    return html.namespace_fragment(namespace, rows), None


def _draw_domain(domain: ComputeDomain, cliques: list[ComputeDomainClique]) -> tuple[str, None]:
    return html.domain_fragment(domain_card(domain, cliques)), None


def _draw_layout(layout: MigLayout) -> tuple[str, None]:
    return html.layout_fragment(layout_card(layout)), None


async def _run_in(
    pool: ProcessPoolExecutor, fn: Callable[..., dict[str, PendingCard]], *args: Any
) -> dict[str, PendingCard]:
    return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)


@dataclass
class _Cached:
    """A fragment and the signature it was drawn for."""

    signature: Hashable
    html: str
    card: Any = None


@dataclass
class Update:
    version: int
    sections: dict[str, dict[str, Any]]  # section -> {"set": {id: html}, "order": [ids] | None}


@dataclass
class FleetView:
    """The web view's state over one client. ``run()`` watches and rebuilds; the HTTP side reads ``sections``
    and ``version`` and subscribes to updates."""

    client: KubeClient
    driver: str = "gpu.nvidia.com"
    namespace: str = "gpudra"
    """The driver's namespace (``IN_DRIVER_NAMESPACE``)."""
    debounce: float = 0.05
    explain_interval: float = 1.0
    explain_limit: int = 50
    catalog: Catalog = field(default_factory=load_catalog)
    version: int = 0
    sections: Sections = field(default_factory=dict)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    _informers: dict[str, Informer] = field(default_factory=dict)
    _explain_stale: bool = True
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _cache: dict[str, _Cached] = field(default_factory=dict)
    _explained: dict[str, PendingCard] = field(default_factory=dict)
    _explaining: asyncio.Task[dict[str, PendingCard]] | None = None
    _explainer: ProcessPoolExecutor | None = None
    _next_explain: float = 0.0
    _subscribers: set[asyncio.Queue[Update | None]] = field(default_factory=set)
    _models: dict[str, dict[Key, tuple[str, WireModel]]] = field(default_factory=dict)

    def _changed(self, name: str) -> Callable[[str, Body], Any]:
        async def handler(kind: str, obj: Body) -> None:
            if name in EXPLAINED_FROM:
                self._explain_stale = True
            self._wake.set()

        return handler

    async def run(self) -> None:
        for name, (resource, parse) in WATCHED.items():
            namespace = self.namespace if name in IN_DRIVER_NAMESPACE else None
            self._informers[name] = Informer(
                self.client, resource, self._changed(name), namespace=namespace, parse=parse
            )
        tasks = [
            asyncio.create_task(self._when_served(n) if n in OPTIONAL else i.run(), name=f"webview {n}")
            for n, i in self._informers.items()
        ]
        try:
            await asyncio.gather(*(i.synced.wait() for n, i in self._informers.items() if n not in OPTIONAL))
            while True:
                await self._wake.wait()
                await asyncio.sleep(self.debounce)
                self._wake.clear()
                self._rebuild()
        finally:
            for task in tasks:
                task.cancel()
            if self._explaining is not None:
                self._explaining.cancel()
            if self._explainer is not None:
                self._explainer.shutdown(wait=False, cancel_futures=True)
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _when_served(self, name: str) -> None:
        """Run an optional resource's informer once the server serves it (said once in the log)."""
        informer = self._informers[name]
        said = False
        while True:
            try:
                await self.client.list(informer.resource, informer.namespace)
                break
            except NotFoundError:
                if not said:
                    log.info(
                        "not served by the API server; its section stays empty",
                        resource=informer.resource.plural,
                    )
                    said = True
                await asyncio.sleep(OPTIONAL_RETRY_SECONDS)
        await informer.run()

    def objects(self, name: str) -> list[Body]:
        return list(self._informers[name].cache.values())

    def _parsed(self, name: str, model: type[M]) -> dict[Key, M]:
        """The watched objects of ``name`` as ``model`` (each parsed once per resourceVersion)."""
        memo = self._models.setdefault(name, {})
        out: dict[Key, M] = {}
        for key, obj in self._informers[name].cache.items():
            version = _rv(obj)
            known = memo.get(key)
            if known is None or known[0] != version:
                known = memo[key] = (version, model.model_validate(obj))
            out[key] = cast(M, known[1])  # each name is parsed as one model only
        for key in set(memo) - set(out):
            del memo[key]
        return out

    # ------------------------------------------------------------ explanations

    def _explain_if_due(self, pending: list[Body]) -> None:
        """Start explaining in the worker process, unless one runs or the interval has not passed (then wake the
        loop again when it has)."""
        if not pending:
            self._explained, self._explain_stale = {}, False
            return
        now = time.monotonic()
        if self._explaining is not None:
            return  # its end wakes the loop, and the inputs are still stale
        if now < self._next_explain:
            asyncio.get_running_loop().call_later(self._next_explain - now, self._wake.set)
            return
        self._explain_stale = False
        objects = {name: self.objects(name) for name in EXPLAINED_FROM}
        if self._explainer is None:
            # A process of its own: explaining is seconds of pure-Python CPU on a large fleet, and in a thread it
            # would hold the GIL against the loop that serves the page and the updates.
            self._explainer = ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn")
            )
        task = asyncio.create_task(
            _run_in(self._explainer, explain_pending, objects, pending, self.driver, self.explain_limit)
        )
        self._explaining = task

        def done(t: asyncio.Task[dict[str, PendingCard]]) -> None:
            self._explaining = None
            self._next_explain = time.monotonic() + max(self.explain_interval, 2 * (time.monotonic() - now))
            if not t.cancelled() and t.exception() is None:
                self._explained = t.result()
            elif not t.cancelled():
                log.warning("explaining pending claims for the web view failed", error=repr(t.exception()))
            self._wake.set()

        task.add_done_callback(done)

    # ------------------------------------------------------------ fragments

    def _cached(self, key: str, signature: Hashable, draw: Callable[[], tuple[str, Any]]) -> _Cached:
        entry = self._cache.get(key)
        if entry is None or entry.signature != signature:
            text, card = draw()
            entry = self._cache[key] = _Cached(signature, text, card)
        return entry

    def _node_fragments(self) -> list[NodeCard]:
        nodes = {n.metadata.name or "": n for n in self._parsed("nodes", Node).values()}
        slices: dict[str, list[ResourceSlice]] = defaultdict(list)
        for s in self._parsed("slices", ResourceSlice).values():
            slices[s.spec.node_name or s.spec.pool.name].append(s)
        held = allocated_devices(self._parsed("claims", ResourceClaim).values(), self.driver)
        by_pool: dict[str, list[tuple[tuple[str, str], str]]] = defaultdict(list)
        for item in held.items():
            by_pool[item[0][0]].append(item)
        cards = []
        for name in sorted(set(nodes) | set(slices) - {""}):
            node = nodes.get(name)
            mine = sorted(slices.get(name, []), key=lambda s: s.metadata.name or "")
            signature = (
                node.metadata.resource_version if node else None,
                tuple((s.metadata.name, s.metadata.resource_version) for s in mine),
                tuple(sorted(by_pool.get(name, []))),
            )

            def draw(
                node: Node | None = node, mine: list[ResourceSlice] = mine, name: str = name
            ) -> tuple[str, Any]:
                card = node_card(name, node, mine, held, self.catalog, self.driver)
                return html.node_fragment(card), card

            cards.append(self._cached(f"node/{name}", signature, draw).card)
        return cards

    def _build(self) -> Sections:
        claims = list(self._parsed("claims", ResourceClaim).values())
        pending = [c for c in claims if c.allocation is None]
        sections: Sections = {}
        node_cards = self._node_fragments()
        sections["nodes"] = {f"node/{c.name}": self._cache[f"node/{c.name}"].html for c in node_cards}
        sections["summary"] = {"summary/fleet": html.summary_fragment(node_cards, len(pending), len(claims))}
        cards = sorted(
            (self._explained.get(c.metadata.uid or "") or self._unexplained(c) for c in pending),
            key=lambda c: (c.namespace, c.name),
        )
        sections["pending"] = {f"pending/{c.namespace}/{c.name}": html.pending_fragment(c) for c in cards}
        sections["claims"] = self._claim_fragments(claims)
        sections["domains"] = self._domain_fragments()
        layouts = sorted(self._parsed("layouts", MigLayout).values(), key=lambda m: m.metadata.name or "")
        sections["layouts"] = {
            f"layout/{m.metadata.name}": self._cached(
                f"layout/{m.metadata.name}", _signature(m), partial(_draw_layout, m)
            ).html
            for m in layouts
        }
        live_keys = {k for section in sections.values() for k in section}
        for key in set(self._cache) - live_keys:
            del self._cache[key]
        return sections

    def _claim_fragments(self, claims: list[ResourceClaim]) -> dict[str, str]:
        by_namespace: dict[str, list[ResourceClaim]] = defaultdict(list)
        for claim in claims:
            by_namespace[claim.metadata.namespace or ""].append(claim)
        out = {}
        for namespace, rows in claims_by_namespace(claims).items():
            signature = tuple(sorted(_signature(c) for c in by_namespace[namespace]))
            key = f"ns/{namespace}"
            out[key] = self._cached(key, signature, partial(_draw_namespace, namespace, rows)).html
        return out

    def _domain_fragments(self) -> dict[str, str]:
        cliques = list(self._parsed("cliques", ComputeDomainClique).values())
        domains = self._parsed("domains", ComputeDomain).values()
        out = {}
        for domain in sorted(domains, key=lambda d: d.metadata.namespaced_name):
            uid = domain.metadata.uid or ""
            related = [c for c in cliques if (c.metadata.name or "").startswith(f"{uid}.")]
            signature = (_signature(domain), tuple(sorted(_signature(c) for c in related)))
            key = f"domain/{domain.metadata.namespace or ''}/{domain.metadata.name or ''}"
            out[key] = self._cached(key, signature, partial(_draw_domain, domain, related)).html
        return out

    def _unexplained(self, claim: ResourceClaim) -> PendingCard:
        meta = claim.metadata
        waiting = len(self._explained) >= self.explain_limit
        headline = (
            f"not explained here: the oldest {self.explain_limit} pending claims are; "
            f"`gpudra explain claim {meta.name} -n {meta.namespace}` explains it"
            if waiting
            else "being explained..."
        )
        return PendingCard(meta.namespace or "", meta.name or "", "", headline, ())

    def _rebuild(self) -> None:
        self._publish_changes(self._build())
        self.ready.set()
        if self._explain_stale:  # after the fleet is out: on a large fleet this is seconds of CPU
            claims = self.objects("claims")
            self._explain_if_due([c for c in claims if not (c.get("status") or {}).get("allocation")])

    def _publish_changes(self, sections: Sections) -> None:
        changes: dict[str, dict[str, Any]] = {}
        for name, fragments in sections.items():
            before = self.sections.get(name, {})
            changed = {k: v for k, v in fragments.items() if before.get(k) != v}
            order = list(fragments) if list(fragments) != list(before) else None
            if changed or order is not None:
                changes[name] = {"set": changed, "order": order}
        if not changes and self.version:
            return
        self.sections = sections
        self.version += 1
        self._publish(Update(self.version, changes))

    # ------------------------------------------------------------ subscribers

    def snapshot(self) -> Update:
        """Everything, as one update (a client that connects late or fell behind)."""
        return Update(
            self.version, {name: {"set": dict(f), "order": list(f)} for name, f in self.sections.items()}
        )

    def _publish(self, update: Update) -> None:
        for queue in list(self._subscribers):
            if queue.full():  # a slow reader: it gets everything afresh instead of the backlog
                while not queue.empty():
                    queue.get_nowait()
                queue.put_nowait(None)
            else:
                queue.put_nowait(update)

    @contextmanager
    def subscribe(self, backlog: int = 32) -> Iterator[asyncio.Queue[Update | None]]:
        """A queue of updates (None: start again from ``snapshot()``)."""
        queue: asyncio.Queue[Update | None] = asyncio.Queue(maxsize=backlog)
        self._subscribers.add(queue)
        try:
            yield queue
        finally:
            self._subscribers.discard(queue)
