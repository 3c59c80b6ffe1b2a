"""The web view's live state: what it watches (``watched``), its fragments drawn again when the objects they are
drawn from change, the versions sent to subscribers (``updates``), and the pending claims' explanations, worked out
in a worker process (``pendingcards``). The pending claims include the claims kube-scheduler would make for waiting
pods' extended resources (``gpudra.planning.podclaims``): on a real cluster such a pod has no claim until a node
fits.

Each fragment (a node, a pending claim, a namespace of claims, a ComputeDomain, a MigLayout) is drawn again only
when the objects it is drawn from change (their resourceVersions are its signature), so a change on one node of a
500-node fleet redraws one card.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gpudra.allocator import DEFAULT_KUBE_MINOR
from gpudra.api.computedomain import ComputeDomain, ComputeDomainClique
from gpudra.api.core import Node, Pod
from gpudra.api.dra import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from gpudra.api.meta import KubeObject
from gpudra.api.miglayout import MigLayout
from gpudra.controller.pending import Said
from gpudra.controller.webview import html
from gpudra.controller.webview.pendingcards import EXPLAINED_FROM, PendingExplainer
from gpudra.controller.webview.updates import Sections, UpdateFeed
from gpudra.controller.webview.watched import Watched
from gpudra.hardware.gpus.catalog import Catalog, load_catalog
from gpudra.kube.informer import Informers
from gpudra.planning.claimcreation import unmade_claims
from gpudra.planning.fleetview import NodeCard, node_card
from gpudra.planning.podclaims import extended_resource_classes, implicit_claims
from gpudra.planning.preparestatus import not_prepared
from gpudra.planning.summaries import allocated_devices, device_users
from gpudra.planning.workloads import (
    ClaimRow,
    PendingCard,
    claims_by_namespace,
    domain_card,
    layout_card,
    stranded_card,
    unmade_card,
    unprepared_card,
)


def _signature(obj: KubeObject) -> tuple[str, str]:
    return obj.metadata.name or "", obj.metadata.resource_version or ""


def _uid(body: dict[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("uid") or "")


def _draw_namespace(namespace: str, rows: list[ClaimRow]) -> tuple[str, None]:
    return html.namespace_fragment(namespace, rows), None


def _draw_domain(domain: ComputeDomain, cliques: list[ComputeDomainClique]) -> tuple[str, None]:
    return html.domain_fragment(domain_card(domain, cliques)), None


def _draw_layout(layout: MigLayout) -> tuple[str, None]:
    return html.layout_fragment(layout_card(layout)), None


@dataclass
class _Cached:
    """A fragment and the signature it was drawn for."""

    signature: Hashable
    html: str
    card: Any = None


@dataclass
class FleetView:
    """The web view's state over the process's informers. ``run()`` rebuilds as they change; the HTTP side reads
    ``feed`` (sections, version, subscriptions) once ``ready`` is set."""

    informers: Informers
    """The process's informers (the view subscribes to them; their owner runs them)."""
    driver: str = "gpu.nvidia.com"
    namespace: str = "gpudra"
    """The driver's namespace, where the clique objects live."""
    debounce: float = 0.05
    explain_interval: float = 1.0
    explain_limit: int = 50
    kube_minor: int = DEFAULT_KUBE_MINOR
    """The API server's Kubernetes minor version, whose allocator the pending claims' explanations follow."""
    stranded: Callable[[str], Said | None] = lambda _: None
    """What the controller said of a claim (by uid) that no scheduler will allocate
    (``PendingClaims.stranded``): its card says that, and the allocator does not explain it. Call :meth:`wake`
    when that changes."""
    catalog: Catalog = field(default_factory=load_catalog)
    feed: UpdateFeed = field(default_factory=UpdateFeed)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _cache: dict[str, _Cached] = field(default_factory=dict)
    _imagined: list[ResourceClaim] = field(default_factory=list)
    """The claims kube-scheduler would make, as of the last build."""

    def __post_init__(self) -> None:
        self.watched = Watched(self.informers, self.namespace, self._changed)
        self.explainer = PendingExplainer(
            self.driver,
            self._wake.set,
            interval=self.explain_interval,
            limit=self.explain_limit,
            kube_minor=self.kube_minor,
        )

    def wake(self) -> None:
        """Build again (what ``stranded`` says changed)."""
        self._wake.set()

    def _changed(self, name: str) -> None:
        if name in EXPLAINED_FROM or name == "pods":
            self.explainer.stale = True
        self._wake.set()

    async def run(self) -> None:
        try:
            await self.watched.synced()
            while True:
                await self._wake.wait()
                await asyncio.sleep(self.debounce)
                self._wake.clear()
                self._rebuild()
        finally:
            self.explainer.stop()

    # ------------------------------------------------------------ fragments

    def _cached(self, key: str, signature: Hashable, draw: Callable[[], tuple[str, Any]]) -> _Cached:
        entry = self._cache.get(key)
        if entry is None or entry.signature != signature:
            text, card = draw()
            entry = self._cache[key] = _Cached(signature, text, card)
        return entry

    def _node_fragments(self) -> list[NodeCard]:
        nodes = {n.metadata.name or "": n for n in self.watched.parsed("nodes", Node)}
        slices: dict[str, list[ResourceSlice]] = defaultdict(list)
        for s in self.watched.parsed("slices", ResourceSlice):
            slices[s.spec.node_name or s.spec.pool.name].append(s)
        claims = self.watched.parsed("claims", ResourceClaim)
        held = allocated_devices(claims, self.driver)
        users = device_users(claims, self.driver)
        by_pool: dict[str, list[tuple[tuple[str, str], str, str]]] = defaultdict(list)  # what a card draws
        for key, holder in held.items():
            by_pool[key[0]].append((key, holder, users.get(key, "")))
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
                card = node_card(name, node, mine, held, self.catalog, self.driver, users)
                return html.node_fragment(card), card

            cards.append(self._cached(f"node/{name}", signature, draw).card)
        return cards

    def _implicit(self, claims: list[ResourceClaim]) -> list[ResourceClaim]:
        """The claims kube-scheduler would make for waiting pods' extended resources."""
        classes = self.watched.parsed("classes", DeviceClass)
        mapping = extended_resource_classes(
            (c.metadata.name or "", c.spec.extended_resource_name) for c in classes
        )
        return implicit_claims(self.watched.parsed("pods", Pod), (c.metadata for c in claims), mapping)

    def _build(self) -> Sections:
        claims = self.watched.parsed("claims", ResourceClaim)
        self._imagined = self._implicit(claims)
        pending = [c for c in claims if c.allocation is None] + self._imagined
        unprepared = [
            unprepared_card(c, devices)
            for c in claims
            if c.allocation is not None and (devices := not_prepared(c))
        ]
        templates = {
            (t.metadata.namespace or "", t.metadata.name or "")
            for t in self.watched.parsed("templates", ResourceClaimTemplate)
        }
        unmade = [
            unmade_card(u)
            for u in unmade_claims(self.watched.parsed("pods", Pod), (c.metadata for c in claims), templates)
        ]
        sections: Sections = {}
        node_cards = self._node_fragments()
        sections["nodes"] = {f"node/{c.name}": self._cache[f"node/{c.name}"].html for c in node_cards}
        sections["summary"] = {
            "summary/fleet": html.summary_fragment(
                node_cards, len(pending) + len(unmade), len(claims), len(unprepared)
            )
        }
        cards = sorted(
            [*(self._pending_card(c) for c in pending), *unmade, *unprepared],
            key=lambda c: (c.namespace, c.name),
        )
        sections["pending"] = {f"pending/{c.namespace}/{c.name}": html.pending_fragment(c) for c in cards}
        sections["claims"] = self._claim_fragments(claims)
        sections["domains"] = self._domain_fragments()
        layouts = sorted(self.watched.parsed("layouts", MigLayout), key=lambda m: m.metadata.name or "")
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
        cliques = self.watched.parsed("cliques", ComputeDomainClique)
        domains = self.watched.parsed("domains", ComputeDomain)
        out = {}
        for domain in sorted(domains, key=lambda d: d.metadata.namespaced_name):
            uid = domain.metadata.uid or ""
            related = [c for c in cliques if (c.metadata.name or "").startswith(f"{uid}.")]
            signature = (_signature(domain), tuple(sorted(_signature(c) for c in related)))
            key = f"domain/{domain.metadata.namespace or ''}/{domain.metadata.name or ''}"
            out[key] = self._cached(key, signature, partial(_draw_domain, domain, related)).html
        return out

    def _pending_card(self, claim: ResourceClaim) -> PendingCard:
        uid = claim.metadata.uid or ""
        stranded = self.stranded(uid)
        if stranded is not None:
            return stranded_card(claim, stranded.reason, stranded.text)
        return self.explainer.cards.get(uid) or self._unexplained(claim)

    def _unexplained(self, claim: ResourceClaim) -> PendingCard:
        meta = claim.metadata
        waiting = len(self.explainer.cards) >= self.explainer.limit
        headline = (
            f"not explained here: the oldest {self.explainer.limit} pending claims are; "
            f"`gpudra explain claim {meta.name} -n {meta.namespace}` explains it"
            if waiting
            else "being explained..."
        )
        return PendingCard(meta.namespace or "", meta.name or "", "", headline, ())

    def _rebuild(self) -> None:
        self.feed.publish(self._build())
        self.ready.set()
        if self.explainer.stale:  # after the fleet is out: on a large fleet this is seconds of CPU
            pending = [  # a claim no scheduler will allocate is not the allocator's to explain
                c
                for c in self.watched.wire("claims")
                if not (c.get("status") or {}).get("allocation") and not self.stranded(_uid(c))
            ] + [c.to_wire() for c in self._imagined]
            self.explainer.explain_if_due(
                lambda: {name: self.watched.wire(name) for name in EXPLAINED_FROM}, pending
            )
