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

from dataclasses import dataclass, field

from gpudra.api.computedomain import ComputeDomain, ComputeDomainClique, ComputeDomainDaemonInfo
from gpudra.api.core import Node, Pod, PodSpec, PodStatus
from gpudra.api.dra import ResourceClaim
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


def _is_daemon_claim(claim: ResourceClaim) -> bool:
    requests = claim.spec.devices.requests or []
    return any(r.exactly is not None and r.exactly.device_class_name == DAEMON_CLASS for r in requests)


def workload_claim(claim: ResourceClaim) -> tuple[str, str] | None:
    """(domain UID, node) of an allocated workload channel claim of a domain, else None."""
    uid = (claim.metadata.labels or {}).get(OBJECT_LABEL)
    if not uid or _is_daemon_claim(claim) or claim.allocation is None:
        return None
    node = claim.allocation.node
    return (uid, node) if node else None


def _pinned_node(spec: PodSpec) -> str | None:
    """The node a DaemonSet pod is made for: spec.nodeName once bound, else its node affinity (as the
    DaemonSet controller writes it) or its hostname nodeSelector."""
    if spec.node_name:
        return spec.node_name
    required = ((spec.affinity or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for field_ in term.get("matchFields") or []:
            if field_.get("key") == "metadata.name" and field_.get("values"):
                return str(field_["values"][0])
    return (spec.node_selector or {}).get("kubernetes.io/hostname") or None


def daemon_pod_state(pod: Pod) -> tuple[str, str] | None:
    """(node, what the daemon pod says) for the domain's status, or None when its node is unknown."""
    node = _pinned_node(pod.spec)
    if node is None:
        return None
    status = pod.status or PodStatus()
    said: list[str] = []
    for container in status.container_statuses or []:
        waiting, ended = container.state.waiting, container.state.terminated
        if waiting is not None:
            detail = f": {waiting.message}" if waiting.message else ""
            said.append(f"container {container.name} waiting: {waiting.reason}{detail}")
        elif ended is not None:
            said.append(
                f"container {container.name} terminated: {ended.reason} "
                f"(exit code {ended.exit_code}){': ' + ended.message if ended.message else ''}"
            )
        if container.restart_count:
            said.append(f"restarted {container.restart_count} times")
    for condition in status.conditions or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            said.append(f"not scheduled: {condition.get('message') or condition.get('reason')}")
    phase = "Terminating" if pod.metadata.deletion_timestamp else status.phase or "Pending"
    text = f"{pod.metadata.namespace}/{pod.metadata.name} is {phase}"
    return node, text + (f" ({'; '.join(said)})" if said else "")


@dataclass(frozen=True, slots=True)
class NodeFacts:
    clique: str
    domains: frozenset[str]
    """UIDs of the domains whose node label (set when a channel is prepared) the node carries."""


def node_facts(node: Node) -> NodeFacts:
    labels = node.metadata.labels or {}
    domains = frozenset(k.removeprefix(NODE_LABEL_PREFIX) for k in labels if k.startswith(NODE_LABEL_PREFIX))
    return NodeFacts(clique=labels.get(CLIQUE_LABEL, ""), domains=domains)


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

    def domain_changed(self, domain: ComputeDomain | None, uid: str) -> set[str]:
        if domain is None:
            self.domains.pop(uid, None)
            return set()
        known = self.domains.get(uid)
        if known is not None and _older(domain.metadata.resource_version, known.metadata.resource_version):
            return set()  # a late watch echo of a write whose answer is already here
        self.domains[uid] = domain
        return {uid}

    def claim_changed(self, claim: ResourceClaim | None, uid: str) -> set[str]:
        before = self.claims.pop(uid, None)
        now = workload_claim(claim) if claim is not None else None
        if now is not None:
            self.claims[uid] = now
        return {entry[0] for entry in (before, now) if entry is not None and before != now}

    def clique_changed(self, clique: ComputeDomainClique | None, key: str) -> set[str]:
        before = self.cliques.pop(key, None)
        affected = {before[0]} if before is not None else set()
        if clique is not None:
            name = clique.metadata.name or ""
            if "." in name:
                uid = name.split(".", 1)[0]
                self.cliques[key] = (uid, list(clique.daemons or []))
                affected.add(uid)
        return affected

    def node_changed(self, node: Node | None, name: str) -> set[str]:
        before = self.nodes.pop(name, None)
        now = node_facts(node) if node is not None else None
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

    def daemon_pod_changed(self, pod: Pod | None, key: str) -> set[str]:
        before = self.daemon_pods.pop(key, None)
        uid = (pod.metadata.labels or {}).get(OBJECT_LABEL) if pod is not None else None
        state = daemon_pod_state(pod) if pod is not None and uid else None
        if uid and state is not None:
            self.daemon_pods[key] = (uid, *state)
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
