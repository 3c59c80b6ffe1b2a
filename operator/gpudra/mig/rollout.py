"""Pure: which MigLayout governs which node, each node's desired state, and each MigLayout's status.

Selection: a MigLayout selects the nodes whose labels match all of ``nodeSelector.matchLabels``; an empty
selector selects every node whose agent reported a MIG-capable GPU. When several MigLayouts select one node the
oldest (creationTimestamp, then name) governs it; the others list the node as ``conflict`` and report Invalid.
A node no MigLayout selects follows its ``nvidia.com/mig.config`` label (a config name), as with mig-manager.

A layout that cannot exist on a node's GPUs (checked against the GPUs the agent reported) is ``invalid`` there
and never handed to the node: the node keeps its previous desired state, so its hardware is untouched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpudra.hardware.gpus.catalog import Catalog, load_catalog
from gpudra.mig.desired import CONFIG_LABEL, DesiredState, NodeReport, Policy, gpu_layouts, node_models
from gpudra.mig.migparted import MigConfigEntry

APPLIED, PROGRESSING, BLOCKED, INVALID = "Applied", "Progressing", "Blocked", "Invalid"


@dataclass(frozen=True)
class LayoutInput:
    """One MigLayout with its layout resolved to mig-parted entries (or the problem that prevented it)."""

    name: str
    generation: int
    created: str
    match_labels: Mapping[str, str]
    policy: Policy = "Static"
    allow_partial: bool = False
    config: str | None = None
    entries: tuple[MigConfigEntry, ...] = ()
    problem: str = ""
    parsed: bool = True  # False: the spec itself is malformed; the layout selects no node


@dataclass(frozen=True)
class NodeInput:
    name: str
    labels: Mapping[str, str]
    desired: str | None = None  # the node's gpudra.dev/mig-desired annotation now
    report: NodeReport | None = None


@dataclass(frozen=True)
class NodeOutcome:
    """One selected node in a MigLayout's status."""

    name: str
    state: str
    message: str = ""
    blocked_by: tuple[str, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"name": self.name, "state": self.state, "message": self.message}
        if self.blocked_by:
            wire["blockedBy"] = list(self.blocked_by)
        return wire


@dataclass
class Rollout:
    desired: dict[str, str | None] = field(default_factory=dict)  # node -> new annotation (None: remove)
    failed_labels: dict[str, str] = field(default_factory=dict)  # node -> why its mig.config label failed
    nodes: dict[str, list[NodeOutcome]] = field(default_factory=dict)  # layout -> its selected nodes


def _mig_capable(report: NodeReport | None, catalog: Catalog) -> bool:
    if report is None:
        return False
    models = node_models(report, catalog)
    return any(m is not None and m.mig is not None for m in (models.get(g.model) for g in report.gpus))


def _selects(layout: LayoutInput, node: NodeInput, catalog: Catalog) -> bool:
    if not layout.parsed:
        return False
    if not layout.match_labels:
        return _mig_capable(node.report, catalog)
    return all(node.labels.get(k) == v for k, v in layout.match_labels.items())


def _problems(entries: Sequence[MigConfigEntry], report: NodeReport | None, catalog: Catalog) -> list[str]:
    if report is None or not report.gpus:
        return []  # not reported yet: the agent validates before it touches anything
    return gpu_layouts(entries, report.gpus, node_models(report, catalog))[1]


def _outcome(node: NodeInput, key: str) -> NodeOutcome:
    report = node.report
    if report is None or report.key != key:
        return NodeOutcome(node.name, "pending", "waiting for the node agent")
    return NodeOutcome(node.name, report.state, report.message, report.blocked_by)


def plan_rollout(
    layouts: Sequence[LayoutInput],
    nodes: Sequence[NodeInput],
    label_configs: Mapping[str, tuple[tuple[MigConfigEntry, ...], str]],
    catalog: Catalog | None = None,
) -> Rollout:
    """Desired-state changes per node and per-layout node outcomes. ``label_configs`` maps each config name
    used in a ``nvidia.com/mig.config`` label to its entries, or to the problem resolving it."""
    cat = catalog or load_catalog()
    ordered = sorted(layouts, key=lambda lay: (lay.created, lay.name))
    out = Rollout(nodes={lay.name: [] for lay in ordered})
    for node in sorted(nodes, key=lambda n: n.name):
        selecting = [lay for lay in ordered if _selects(lay, node, cat)]
        wanted: str | None = node.desired
        if selecting:
            winner = selecting[0]
            conflict = f"also selected by the older MigLayout {winner.name}, which governs this node"
            for other in selecting[1:]:
                out.nodes[other.name].append(NodeOutcome(node.name, "conflict", conflict))
            if winner.problem:
                out.nodes[winner.name].append(NodeOutcome(node.name, "invalid", winner.problem))
                continue
            problems = _problems(winner.entries, node.report, cat)
            if problems:
                out.nodes[winner.name].append(NodeOutcome(node.name, "invalid", "; ".join(problems)))
                continue
            desired = DesiredState(
                source="MigLayout", name=winner.name, generation=winner.generation, policy=winner.policy,
                allow_partial=winner.allow_partial, config=winner.config, entries=winner.entries,
            )  # fmt: skip
            wanted = desired.to_json()
            out.nodes[winner.name].append(_outcome(node, desired.key))
        elif CONFIG_LABEL in node.labels:
            name = node.labels[CONFIG_LABEL]
            entries, problem = label_configs.get(name, ((), f"mig-parted config {name!r} was not resolved"))
            problem = problem or "; ".join(_problems(entries, node.report, cat))
            if problem:
                out.failed_labels[node.name] = f"{CONFIG_LABEL}={name}: {problem}"
                continue
            wanted = DesiredState(source="Label", name=name, config=name, entries=entries).to_json()
        else:
            wanted = None
        if wanted != node.desired:
            out.desired[node.name] = wanted
    return out


def _condition(kind: str, ok: bool, reason: str, message: str) -> dict[str, Any]:
    return {"type": kind, "status": "True" if ok else "False", "reason": reason, "message": message}


def _listing(outcomes: Sequence[NodeOutcome]) -> str:
    return "; ".join(f"{o.name}: {o.message}" for o in outcomes)


def layout_status(
    layout: LayoutInput,
    outcomes: Sequence[NodeOutcome],
    previous: Mapping[str, Any] | None,
    now: str,
) -> dict[str, Any]:
    """A MigLayout's status: per-node outcomes, counts and conditions. A condition keeps its
    lastTransitionTime while its status does not change, so an unchanged rollout gives an equal status."""
    total = len(outcomes)
    states = [o.state for o in outcomes]
    applied = states.count("success")
    blocked = [o for o in outcomes if o.state == "blocked"]
    invalid = [o for o in outcomes if o.state in ("invalid", "conflict")]
    busy = [o for o in outcomes if o.state in ("pending", "applying")]
    if layout.problem:
        invalid_cond = _condition(INVALID, True, "InvalidLayout", layout.problem)
    elif invalid:
        reason = "NodeConflict" if all(o.state == "conflict" for o in invalid) else "InvalidOnNodes"
        invalid_cond = _condition(INVALID, True, reason, _listing(invalid))
    else:
        invalid_cond = _condition(INVALID, False, "Valid", "the layout is valid on every selected node")
    done = total > 0 and applied == total
    conditions = [
        _condition(APPLIED, done, "AllNodesApplied" if done else ("NotApplied" if total else "NoNodesSelected"),
                   f"{applied} of {total} selected nodes applied"),
        _condition(PROGRESSING, bool(busy), "Applying" if busy else "Idle",
                   _listing(busy) if busy else "no node is changing"),
        _condition(BLOCKED, bool(blocked), "DevicesInUse" if blocked else "NotBlocked",
                   _listing(blocked) if blocked else "no device in use is in the way"),
        invalid_cond,
    ]  # fmt: skip
    before = {c.get("type"): c for c in (previous or {}).get("conditions") or []}
    for cond in conditions:
        cond["message"] = cond["message"][:1024]
        cond["observedGeneration"] = layout.generation
        old = before.get(cond["type"])
        same = old is not None and old.get("status") == cond["status"]
        cond["lastTransitionTime"] = old.get("lastTransitionTime", now) if same and old else now
    return {
        "observedGeneration": layout.generation,
        "nodesSelected": total,
        "nodesApplied": applied,
        "nodesBlocked": len(blocked),
        "applied": f"{applied}/{total}",
        "conditions": conditions,
        "nodes": [o.to_wire() for o in outcomes],
    }
