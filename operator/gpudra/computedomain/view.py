"""What the ComputeDomain controller has observed, and each domain's status computed from it (no I/O).

Watch events (domains, their workload claims, ComputeDomainClique objects, Nodes) update one ``DomainView``;
each update returns the UIDs of the domains whose status may have changed, so the status writer recomputes
only those. Inputs per domain:

- workload nodes: the nodes its channel claims are allocated on (claims labelled
  ``resource.nvidia.com/computeDomain=<uid>``, daemon claims excluded) — known at scheduling time, before
  any prepare, so a node whose daemon never starts is named;
- daemon reports: the ``daemons`` of every ComputeDomainClique named ``<uid>.<cliqueID>``;
- node cliques: each Node's ``nvidia.com/gpu.clique`` label ("" without it; absent once the Node is gone);
- held nodes (daemonset mode): a node labelled for another domain (``computedomain.gpudra.dev/<uid>``)
  cannot serve this one too; ``index.check_node_admits`` words why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpudra.api.computedomain import ComputeDomain, ComputeDomainClique, ComputeDomainDaemonInfo
from gpudra.api.dra import allocated_node
from gpudra.computedomain.clique import CLIQUE_LABEL
from gpudra.computedomain.index import DomainRef, check_node_admits
from gpudra.computedomain.names import (
    DAEMON_CLASS,
    NODE_LABEL_PREFIX,
    OBJECT_LABEL,
    DaemonMode,
)
from gpudra.computedomain.status import DomainStatus, aggregate_status
from gpudra.errors import ComputeDomainPlacementError


def _older(version: str | None, than: str | None) -> bool:
    """True when both resourceVersions are numbers (as every API server makes them) and ``version`` is lower."""
    return bool(version and than and version.isdigit() and than.isdigit() and int(version) < int(than))


def domain_ref(domain: ComputeDomain) -> DomainRef:
    meta = domain.metadata
    return DomainRef(
        uid=meta.uid or "",
        display=f"{meta.namespace}/{meta.name}",
        allocation_mode=domain.spec.channel.allocation_mode,
    )


def _is_daemon_claim(claim: Mapping[str, Any]) -> bool:
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    return any((r.get("exactly") or {}).get("deviceClassName") == DAEMON_CLASS for r in requests)


def workload_claim(claim: Mapping[str, Any]) -> tuple[str, str] | None:
    """(domain UID, node) of an allocated workload channel claim of a domain, else None."""
    labels = (claim.get("metadata") or {}).get("labels") or {}
    uid = labels.get(OBJECT_LABEL)
    if not uid or _is_daemon_claim(claim):
        return None
    node = allocated_node(claim)
    return (str(uid), node) if node else None


def _pinned_node(spec: Mapping[str, Any]) -> str | None:
    """The node a DaemonSet pod is made for: spec.nodeName once bound, else its node affinity (as the
    DaemonSet controller writes it) or its hostname nodeSelector."""
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for field_ in term.get("matchFields") or []:
            if field_.get("key") == "metadata.name" and field_.get("values"):
                return str(field_["values"][0])
    hostname = (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname")
    return str(hostname) if hostname else None


def daemon_pod_state(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(node, what the daemon pod says) for the domain's status, or None when its node is unknown."""
    meta = pod.get("metadata") or {}
    node = _pinned_node(pod.get("spec") or {})
    if node is None:
        return None
    status = pod.get("status") or {}
    said: list[str] = []
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        waiting, ended = state.get("waiting"), state.get("terminated")
        if waiting:
            detail = f": {waiting['message']}" if waiting.get("message") else ""
            said.append(f"container {container.get('name')} waiting: {waiting.get('reason', '')}{detail}")
        elif ended:
            said.append(
                f"container {container.get('name')} terminated: {ended.get('reason', '')} "
                f"(exit code {ended.get('exitCode')}){': ' + ended['message'] if ended.get('message') else ''}"
            )
        if container.get("restartCount"):
            said.append(f"restarted {container['restartCount']} times")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            said.append(f"not scheduled: {condition.get('message') or condition.get('reason')}")
    phase = "Terminating" if meta.get("deletionTimestamp") else status.get("phase") or "Pending"
    text = f"{meta.get('namespace')}/{meta.get('name')} is {phase}"
    return node, text + (f" ({'; '.join(said)})" if said else "")


@dataclass(frozen=True, slots=True)
class NodeFacts:
    clique: str
    domains: frozenset[str]
    """UIDs of the domains whose node label (set when a channel is prepared) the node carries."""


def node_facts(node: Mapping[str, Any]) -> NodeFacts:
    labels = (node.get("metadata") or {}).get("labels") or {}
    domains = frozenset(k.removeprefix(NODE_LABEL_PREFIX) for k in labels if k.startswith(NODE_LABEL_PREFIX))
    return NodeFacts(clique=str(labels.get(CLIQUE_LABEL, "")), domains=domains)


@dataclass
class DomainView:
    mode: DaemonMode = "daemonset"
    span_cliques: bool = True
    domains: dict[str, ComputeDomain] = field(default_factory=dict)
    claims: dict[str, tuple[str, str]] = field(default_factory=dict)
    """claim UID -> (domain UID, node)"""
    cliques: dict[str, tuple[str, list[ComputeDomainDaemonInfo]]] = field(default_factory=dict)
    """"<namespace>/<name>" of a clique object -> (domain UID, daemons)"""
    nodes: dict[str, NodeFacts] = field(default_factory=dict)
    daemon_pods: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    """"<namespace>/<name>" of a daemon pod -> (domain UID, node, what it says)"""

    # ------------------------------------------------------------------ updates

    def domain_changed(self, body: Mapping[str, Any] | None, uid: str) -> set[str]:
        if body is None:
            self.domains.pop(uid, None)
            return set()
        domain = ComputeDomain.from_wire(dict(body))
        known = self.domains.get(uid)
        if known is not None and _older(domain.metadata.resource_version, known.metadata.resource_version):
            return set()  # a late watch echo of a write whose answer is already here
        self.domains[uid] = domain
        return {uid}

    def claim_changed(self, body: Mapping[str, Any] | None, uid: str) -> set[str]:
        before = self.claims.pop(uid, None)
        now = workload_claim(body) if body is not None else None
        if now is not None:
            self.claims[uid] = now
        return {entry[0] for entry in (before, now) if entry is not None and before != now}

    def clique_changed(self, body: Mapping[str, Any] | None, key: str) -> set[str]:
        before = self.cliques.pop(key, None)
        affected = {before[0]} if before is not None else set()
        if body is not None:
            clique = ComputeDomainClique.from_wire(dict(body))
            name = clique.metadata.name or ""
            if "." in name:
                uid = name.split(".", 1)[0]
                self.cliques[key] = (uid, list(clique.daemons or []))
                affected.add(uid)
        return affected

    def node_changed(self, body: Mapping[str, Any] | None, name: str) -> set[str]:
        before = self.nodes.pop(name, None)
        now = node_facts(body) if body is not None else None
        if now is not None:
            self.nodes[name] = now
        if before == now:
            return set()
        touched = set(self.domains_on(name))
        for facts in (before, now):
            if facts is not None:
                touched |= facts.domains
        if before is not None and now is not None and before.clique == now.clique:
            # only node labels of domains changed: they matter for holding (daemonset mode) alone
            touched = {uid for uid in touched if self.mode == "daemonset"}
        return touched & set(self.domains)

    def daemon_pod_changed(self, body: Mapping[str, Any] | None, key: str) -> set[str]:
        before = self.daemon_pods.pop(key, None)
        uid = ((body or {}).get("metadata") or {}).get("labels", {}).get(OBJECT_LABEL)
        state = daemon_pod_state(body) if body is not None and uid else None
        if state is not None:
            self.daemon_pods[key] = (str(uid), *state)
        now = self.daemon_pods.get(key)
        return {entry[0] for entry in (before, now) if entry is not None and before != now}

    def domains_on(self, node: str) -> set[str]:
        found = {uid for uid, where in self.claims.values() if where == node}
        for uid, daemons in self.cliques.values():
            if any(d.node_name == node for d in daemons):
                found.add(uid)
        return found

    # ------------------------------------------------------------------ status

    def workload_nodes(self, uid: str) -> set[str]:
        return {node for domain, node in self.claims.values() if domain == uid}

    def daemons(self, uid: str) -> list[ComputeDomainDaemonInfo]:
        return [d for domain, daemons in self.cliques.values() if domain == uid for d in daemons]

    def held_nodes(self, uid: str, nodes: set[str]) -> dict[str, str]:
        """node -> why another domain keeps ``uid`` off it (daemonset mode only)."""
        domain = self.domains.get(uid)
        if domain is None or self.mode != "daemonset":
            return {}
        joining = domain_ref(domain)
        held: dict[str, str] = {}
        for node in sorted(nodes):
            facts = self.nodes.get(node)
            if facts is None or uid in facts.domains:
                continue
            others = [self._ref(other) for other in sorted(facts.domains)]
            try:
                check_node_admits(node, joining, others, self.mode)
            except ComputeDomainPlacementError as exc:
                held[node] = str(exc)
        return held

    def _ref(self, uid: str) -> DomainRef:
        domain = self.domains.get(uid)
        return domain_ref(domain) if domain is not None else DomainRef(uid=uid, display=f"(uid {uid})")

    def status_of(self, uid: str, now: str) -> DomainStatus | None:
        domain = self.domains.get(uid)
        if domain is None:
            return None
        nodes = self.workload_nodes(uid)
        previous = domain.status.conditions if domain.status is not None else None
        return aggregate_status(
            domain,
            workload_nodes=nodes,
            daemons=self.daemons(uid),
            node_cliques={name: facts.clique for name, facts in self.nodes.items()},
            now=now,
            previous_conditions=previous or (),
            held_nodes=self.held_nodes(uid, nodes),
            span_cliques=self.span_cliques,
            daemon_pods={node: text for domain, node, text in self.daemon_pods.values() if domain == uid},
        )
