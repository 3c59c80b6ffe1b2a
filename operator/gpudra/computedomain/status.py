"""A ComputeDomain's status from what is observed, and the smallest patch that writes it.

Inputs: the domain; the nodes its workload pods are scheduled on; the reports of its IMEX daemons (every
clique object of the domain); and each existing node's NVLink clique as its GPUs report it now ("" when in
no clique; a node missing from the map no longer exists). The domain's nodes are the union of the workload
nodes and the reporting nodes. A node is Ready when its daemon reports Ready, the node exists, and the
node is still in the clique its daemon registered in. Otherwise the reason is named:

- ``DaemonNotStarted``: a workload runs there but no daemon of the domain registered yet (with what its
  daemon pod says, when there is one: pending, image pull failure, crash loop);
- ``DaemonNotReady``: the daemon registered but is not Ready (its own message follows);
- ``NodeGone``: the Node object is deleted; the entry stays until the daemon's registration is released;
- ``FabricLost``: the node's GPUs report no clique any more;
- ``CliqueChanged``: the node reports another clique than the one its daemon registered in.
- ``NodeHeld``: a workload of this domain landed on a node that serves another domain and cannot serve
  both (``held_nodes``, the message from ``index.check_node_admits``); the channel waits for that node.

The domain is Ready when every node is Ready, its cliques are consistent, and with numNodes > 0 at least
numNodes nodes are there (numNodes 0: any count, none included). Several nodes when one has no clique is
an error (``CliqueMismatch``): that node cannot join any IMEX domain. Nodes in different cliques share no
NVLink, so pods there cannot share GPU memory with each other: with ``span_cliques`` False that is an error
too (``CliqueMismatch``, Ready False); with ``span_cliques`` True each clique is its own IMEX domain (its
own ComputeDomainClique object and indices, as NVIDIA's driver does with ComputeDomainCliques, needed for
any domain larger than one rack of 18 trays), so the domain can be Ready, and ``CliqueConsistent`` is
False with reason ``MultipleCliques`` to say so. The messages name the nodes by clique. A node that lost
its fabric counts in the clique its daemon registered in: it is a fault of that node (``FabricLost``), not
a workload spread over cliques.

Conditions (type, then True when good): ``Ready`` (the summary, its message says everything that is
missing), ``NodesReady``, ``CliqueConsistent``. lastTransitionTime is carried over from the previous
conditions while a condition's status does not change, so the result is a pure function of its inputs.

``status_patch`` compares the new status with the stored one (ignoring order of nodes and conditions and
transition times) and returns None when nothing changed: the controller never writes a no-op, and since it
sends a merge patch without resourceVersion a write never fails with 409 either.

``status.conditions`` is gpudra's additive field of the CRD; ``to_wire(include_conditions=False)`` gives
NVIDIA's status alone.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from gpudra.api.computedomain import (
    ComputeDomain,
    ComputeDomainDaemonInfo,
    ComputeDomainNode,
    ComputeDomainStatus,
)
from gpudra.api.meta import Condition

NodeReason = Literal[
    "DaemonNotStarted", "DaemonNotReady", "NodeGone", "FabricLost", "CliqueChanged", "NodeHeld"
]
CONDITION_TYPES: Final = ("Ready", "NodesReady", "CliqueConsistent")
_NO_CLIQUE: Final = "(no clique)"


@dataclass(frozen=True, slots=True)
class DaemonReport:
    """What one IMEX daemon of the domain reports about its node."""

    node_name: str
    ip_address: str
    clique_id: str
    index: int | None
    status: Literal["Ready", "NotReady"]
    message: str = ""

    @classmethod
    def from_info(cls, info: ComputeDomainDaemonInfo, message: str = "") -> DaemonReport:
        said = message or info.message or ""
        return cls(info.node_name, info.ip_address, info.clique_id, info.index, info.status, said)


@dataclass(frozen=True, slots=True)
class NodeProblem:
    node_name: str
    reason: NodeReason
    message: str


@dataclass(frozen=True, slots=True)
class DomainStatus:
    """The computed status: the CRD's fields plus conditions and the per-node problems behind them."""

    status: ComputeDomainStatus
    conditions: tuple[Condition, ...]
    problems: tuple[NodeProblem, ...]

    @property
    def ready(self) -> bool:
        return self.status.status == "Ready"

    def condition(self, type_: str) -> Condition:
        return next(c for c in self.conditions if c.type == type_)

    def to_wire(self, *, include_conditions: bool = True) -> dict[str, Any]:
        body = self.status.to_wire()
        body.setdefault("nodes", [])
        if include_conditions:
            body["conditions"] = [c.to_wire() for c in self.conditions]
        return body


def _node_problem(
    node: str,
    report: DaemonReport | None,
    fabric: str | None,
    workload: bool,
    held: str | None,
    pod_state: str | None,
) -> NodeProblem | None:
    if fabric is None:
        return NodeProblem(node, "NodeGone", "node is gone (Node object deleted)")
    if report is None and held:
        return NodeProblem(node, "NodeHeld", held)
    if report is None:
        what = "a workload pod runs here but " if workload else ""
        pod = f"; its daemon pod {pod_state}" if pod_state else ""
        return NodeProblem(node, "DaemonNotStarted", f"{what}no IMEX daemon of this domain has started{pod}")
    if report.clique_id and not fabric:
        return NodeProblem(
            node,
            "FabricLost",
            f"NVLink fabric lost: the GPUs report no clique (daemon registered in {report.clique_id})",
        )
    if report.clique_id != fabric:
        return NodeProblem(
            node,
            "CliqueChanged",
            f"node reports clique {fabric or _NO_CLIQUE}, its daemon registered in "
            f"{report.clique_id or _NO_CLIQUE}",
        )
    if report.status != "Ready":
        detail = f": {report.message}" if report.message else ""
        return NodeProblem(node, "DaemonNotReady", f"IMEX daemon not ready{detail}")
    return None


def _pick_report(reports: Sequence[DaemonReport], fabric: str | None) -> DaemonReport | None:
    """One report per node; a node registered in two cliques (it moved) is judged by its current one."""
    if not reports:
        return None
    current = [r for r in reports if r.clique_id == fabric]
    return (current or sorted(reports, key=lambda r: r.clique_id))[0]


def _clique_mismatch(cliques: Mapping[str, str], span_cliques: bool) -> tuple[str | None, bool]:
    """(message, blocking) when the nodes (name -> clique) are not all in one NVLink clique, else
    (None, False). Blocking: a node in no clique among others, or several cliques unless they may span."""
    groups: dict[str, list[str]] = {}
    for node, clique in sorted(cliques.items()):
        groups.setdefault(clique, []).append(node)
    if len(cliques) < 2 or (len(groups) == 1 and "" not in groups):
        return None, False
    parts = [f"{clique or _NO_CLIQUE}: {', '.join(nodes)}" for clique, nodes in sorted(groups.items())]
    if span_cliques and "" not in groups:
        return (
            f"the domain spans {len(groups)} NVLink cliques, each its own IMEX domain: pods share GPU "
            f"memory over NVLink only with pods in the same clique — {'; '.join(parts)}"
        ), False
    return (
        "the domain's nodes are not in one NVLink clique, and nodes of different cliques (or in none) "
        f"cannot share GPU memory — {'; '.join(parts)}"
    ), True


def _condition(
    type_: str,
    ok: bool,
    reason: str,
    message: str,
    previous: Mapping[str, Condition],
    now: str,
    gen: int | None,
) -> Condition:
    status = "True" if ok else "False"
    before = previous.get(type_)
    since = before.last_transition_time if before is not None and before.status == status else None
    return Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=since or now,
        observed_generation=gen,
    )


def aggregate_status(
    domain: ComputeDomain,
    *,
    workload_nodes: Collection[str],
    daemons: Sequence[ComputeDomainDaemonInfo | DaemonReport],
    node_cliques: Mapping[str, str],
    now: str,
    previous_conditions: Sequence[Condition] = (),
    held_nodes: Mapping[str, str] | None = None,
    span_cliques: bool = False,
    daemon_pods: Mapping[str, str] | None = None,
) -> DomainStatus:
    """The status of ``domain`` from what is observed (see the module docstring for the rules).

    ``held_nodes``: node -> why another domain keeps this domain off it (daemonset mode, one IMEX daemon
    per node); only consulted for nodes where this domain's daemon has not registered.
    ``span_cliques``: whether a domain may be Ready over several NVLink cliques (see the module docstring).
    ``daemon_pods``: node -> what the domain's daemon pod there says (e.g. "is Pending: ImagePullBackOff"),
    shown for nodes whose daemon has not registered (daemonset mode; NVIDIA #289)."""
    reports = [d if isinstance(d, DaemonReport) else DaemonReport.from_info(d) for d in daemons]
    by_node: dict[str, list[DaemonReport]] = {}
    for entry in reports:
        by_node.setdefault(entry.node_name, []).append(entry)
    names = sorted(set(workload_nodes) | set(by_node))
    nodes: list[ComputeDomainNode] = []
    problems: list[NodeProblem] = []
    cliques: dict[str, str] = {}
    for name in names:
        fabric = node_cliques.get(name)
        report = _pick_report(by_node.get(name, []), fabric)
        problem = _node_problem(
            name,
            report,
            fabric,
            name in workload_nodes,
            (held_nodes or {}).get(name),
            (daemon_pods or {}).get(name),
        )
        clique = report.clique_id if report is not None else (fabric or "")
        if problem is not None and problem.reason == "FabricLost":
            cliques[name] = clique  # still a member of its clique, with a hardware fault: NodesNotReady
        elif fabric is not None:
            cliques[name] = fabric
        nodes.append(
            ComputeDomainNode(
                name=name,
                ip_address=report.ip_address if report is not None else "",
                clique_id=clique,
                index=report.index if report is not None else None,
                status="Ready" if problem is None else "NotReady",
            )
        )
        if problem is not None:
            problems.append(problem)

    wanted = domain.spec.num_nodes
    spread, blocking = _clique_mismatch(cliques, span_cliques)
    mismatch = spread if blocking else None
    too_few = wanted > 0 and len(nodes) < wanted
    ready = not problems and mismatch is None and not too_few

    missing: list[str] = []
    if mismatch is not None:
        missing.append(mismatch)
    if problems:
        listed = ", ".join(f"{p.node_name} ({p.message})" for p in problems)
        missing.append(f"{len(problems)} of {len(nodes)} nodes not ready: {listed}")
    if too_few:
        missing.append(f"{len(nodes)} of numNodes {wanted} nodes have joined")
    if mismatch is not None:
        reason = "CliqueMismatch"
    elif problems:
        reason = "NodesNotReady"
    elif too_few:
        reason = "WaitingForNodes"
    else:
        reason = "AllNodesReady" if nodes else "NoNodes"
    spans = f" in {len(set(cliques.values()))} NVLink cliques" if spread is not None else ""
    summary = "; ".join(missing) or (
        f"all {len(nodes)} nodes ready{spans}"
        if nodes
        else "no workload scheduled yet; nodes join as pods land"
    )

    previous = {c.type: c for c in previous_conditions}
    gen = domain.metadata.generation
    nodes_ok = not problems
    nodes_message = (
        "; ".join(f"{p.node_name}: {p.reason}: {p.message}" for p in problems)
        if problems
        else f"{len(nodes)} of {len(nodes)} nodes ready"
    )
    clique_message = spread or (
        f"all nodes in clique {next(iter(cliques.values())) or _NO_CLIQUE}" if cliques else "no nodes"
    )
    conditions = (
        _condition("Ready", ready, reason, summary, previous, now, gen),
        _condition(
            "NodesReady",
            nodes_ok,
            "AllNodesReady" if nodes_ok else problems[0].reason,
            nodes_message,
            previous,
            now,
            gen,
        ),
        _condition(
            "CliqueConsistent",
            spread is None,
            "SingleClique" if spread is None else "CliqueMismatch" if blocking else "MultipleCliques",
            clique_message,
            previous,
            now,
            gen,
        ),
    )
    return DomainStatus(
        status=ComputeDomainStatus(status="Ready" if ready else "NotReady", nodes=nodes),
        conditions=conditions,
        problems=tuple(problems),
    )


# ---------------------------------------------------------------- patch


def _as_wire(status: DomainStatus | ComputeDomainStatus | Mapping[str, Any] | None) -> dict[str, Any]:
    if status is None:
        return {}
    if isinstance(status, DomainStatus):
        return status.to_wire()
    if isinstance(status, ComputeDomainStatus):
        return status.to_wire()
    return dict(status)


def _normal(key: str, value: Any) -> Any:
    if key == "nodes" and isinstance(value, list):
        return sorted(
            (dict(n) for n in value if isinstance(n, Mapping)), key=lambda n: str(n.get("name", ""))
        )
    if key == "conditions" and isinstance(value, list):
        cleaned = [
            {k: v for k, v in c.items() if k != "lastTransitionTime" and v is not None}
            for c in value
            if isinstance(c, Mapping)
        ]
        return sorted(cleaned, key=lambda c: str(c.get("type", "")))
    return value


def status_patch(
    old_status: DomainStatus | ComputeDomainStatus | Mapping[str, Any] | None,
    new_status: DomainStatus | ComputeDomainStatus | Mapping[str, Any],
) -> dict[str, Any] | None:
    """A JSON merge patch ``{"status": {...changed fields...}}`` for the status subresource, or None when
    the stored status already says the same (node and condition order and transition times ignored).
    Fields the stored status has and the new one does not are left alone."""
    old = _as_wire(old_status)
    new = _as_wire(new_status)
    changed = {key: value for key, value in new.items() if _normal(key, old.get(key)) != _normal(key, value)}
    return {"status": changed} if changed else None
