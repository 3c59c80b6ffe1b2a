"""The MIG planner's apply policy: a suggestion becomes a planner-owned MigLayout per node.

With ``GPUDRA_MIG_PLANNER=apply`` the controller writes the suggested layouts of a node into the MigLayout
``gpudra-planner-<node>`` (label ``gpudra.dev/planner=true``; nodeSelector on ``kubernetes.io/hostname``; one
mig-parted entry per repartitioned GPU: ``devices: [index]`` narrowed by ``device-filter`` to the GPU's model;
entries for GPUs it repartitioned earlier stay). The MigLayout reconciler and the agent apply it. It never
writes a node that a user's MigLayout selects or that follows an ``nvidia.com/mig.config`` label (it only
suggests, and says so; a planner MigLayout whose node a user's MigLayout later selects is deleted, so the
user's governs), and it does not re-plan a node
while its planner MigLayout is progressing (not yet observed, Progressing, or a node still pending/applying),
so demand that is being served is not planned twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpudra.allocator import NodeInfo
from gpudra.api.miglayout import API_VERSION, PROGRESSING
from gpudra.controller.miglayouts import MIGLAYOUTS
from gpudra.errors import KubeError
from gpudra.kube.client import KubeClient
from gpudra.mig import (
    CONFIG_LABEL,
    DemandPlan,
    GpuSuggestion,
    MigConfigEntry,
    MigPartedConfigError,
    parse_entries,
)
from gpudra.telemetry import get_logger

log = get_logger(__name__)

PLANNER_LABEL = "gpudra.dev/planner"
HOSTNAME_LABEL = "kubernetes.io/hostname"
_BUSY_STATES = ("pending", "applying")


def layout_name(node: str) -> str:
    return f"gpudra-planner-{node}"


def is_planner_owned(body: Mapping[str, Any]) -> bool:
    return ((body.get("metadata") or {}).get("labels") or {}).get(PLANNER_LABEL) == "true"


def selects(body: Mapping[str, Any], node: NodeInfo) -> bool:
    """Whether a MigLayout's nodeSelector selects the node (absent or empty: every node)."""
    labels = (((body.get("spec") or {}).get("nodeSelector") or {}).get("matchLabels")) or {}
    return all(node.labels.get(k) == v for k, v in labels.items())


def progressing(body: Mapping[str, Any]) -> bool:
    """Whether a MigLayout is still being applied (or not yet seen by the reconciler)."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    if status.get("observedGeneration") != meta.get("generation"):
        return True
    if any(
        c.get("type") == PROGRESSING and c.get("status") == "True" for c in status.get("conditions") or []
    ):
        return True
    return any(n.get("state") in _BUSY_STATES for n in status.get("nodes") or [])


def _entry(gpu: GpuSuggestion, pci_device_id: int) -> MigConfigEntry:
    return MigConfigEntry((gpu.gpu_index,), True, tuple(sorted(gpu.counts.items())), (pci_device_id,))


def planner_layout(
    node: str,
    gpus: Sequence[GpuSuggestion],
    pci_ids: Mapping[str, int],
    existing: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The planner's MigLayout for a node: the existing planner entries of other GPUs, plus one entry per
    suggested GPU."""
    kept: list[MigConfigEntry] = []
    if existing is not None:
        try:
            kept = list(parse_entries(((existing.get("spec") or {}).get("layout") or {}).get("entries")))
        except MigPartedConfigError:
            kept = []  # ours, but unreadable: rewritten from the suggestion
    changed = {g.gpu_index for g in gpus}
    entries = [e for e in kept if e.devices == "all" or not set(e.devices) & changed]
    entries += [_entry(g, pci_ids[g.model_id]) for g in gpus]
    entries.sort(key=lambda e: () if e.devices == "all" else e.devices)
    return {
        "apiVersion": API_VERSION,
        "kind": "MigLayout",
        "metadata": {"name": layout_name(node), "labels": {PLANNER_LABEL: "true"}},
        "spec": {
            "nodeSelector": {"matchLabels": {HOSTNAME_LABEL: node}},
            "policy": "Static",
            "layout": {"entries": [e.to_document() for e in entries]},
        },
    }


@dataclass(frozen=True)
class NodeDecision:
    """What the apply policy does for one node: write a layout (``body``), or only suggest (``note`` says
    why)."""

    node: str
    note: str
    body: dict[str, Any] | None = None


def decide(
    plan: DemandPlan,
    nodes: Sequence[NodeInfo],
    layouts: Sequence[Mapping[str, Any]],
    pci_ids: Mapping[str, int],
) -> list[NodeDecision]:
    """Pure: per node with GPUs to repartition, whether and what to write."""
    by_name = {n.name: n for n in nodes}
    out: list[NodeDecision] = []
    for suggestion in plan.nodes:
        if not suggestion.gpus:
            continue
        name = suggestion.node
        node = by_name.get(name, NodeInfo(name, {HOSTNAME_LABEL: name}))
        ours = next((b for b in layouts if b["metadata"]["name"] == layout_name(name)), None)
        user = next((b for b in layouts if not is_planner_owned(b) and selects(b, node)), None)
        mine = layout_name(name)
        if CONFIG_LABEL in node.labels:
            label = f"{CONFIG_LABEL}={node.labels[CONFIG_LABEL]}"
            out.append(NodeDecision(name, f"not applied: node {name} follows its label {label}"))
        elif user is not None:
            who = user["metadata"]["name"]
            out.append(
                NodeDecision(name, f"not applied: MigLayout {who} (not the planner's) selects node {name}")
            )
        elif ours is not None and not is_planner_owned(ours):
            out.append(NodeDecision(name, f"not applied: MigLayout {mine} exists and is not the planner's"))
        elif ours is not None and progressing(ours):
            out.append(NodeDecision(name, f"waiting: MigLayout {mine} is still being applied"))
        else:
            body = planner_layout(name, suggestion.gpus, pci_ids, ours)
            unchanged = ours is not None and ours.get("spec") == body["spec"]
            out.append(NodeDecision(name, f"applying through MigLayout {mine}", None if unchanged else body))
    return out


def superseded(layouts: Sequence[Mapping[str, Any]], nodes: Sequence[NodeInfo]) -> list[str]:
    """Pure: planner MigLayouts whose node a user's MigLayout now selects (the user's wins: MigLayouts govern a
    node oldest first, so the planner's must go for the user's to apply)."""
    out: list[str] = []
    for node in nodes:
        name = layout_name(node.name)
        ours = next((b for b in layouts if b["metadata"]["name"] == name and is_planner_owned(b)), None)
        if ours is not None and any(not is_planner_owned(b) and selects(b, node) for b in layouts):
            out.append(name)
    return out


async def step_aside(client: KubeClient, nodes: Sequence[NodeInfo]) -> None:
    """Delete the planner MigLayouts that a user's MigLayout supersedes."""
    layouts, _ = await client.list_raw(MIGLAYOUTS)
    for name in superseded(layouts, nodes):
        try:
            await client.delete(MIGLAYOUTS, name)
            log.info("planner MigLayout removed: a user's MigLayout selects its node", layout=name)
        except KubeError as exc:
            log.warning("removing a superseded planner MigLayout failed", layout=name, error=str(exc))


async def apply_plan(
    client: KubeClient, plan: DemandPlan, nodes: Sequence[NodeInfo], pci_ids: Mapping[str, int]
) -> dict[str, str]:
    """Write the planner MigLayouts the plan calls for; returns a note per node for the claims' Events."""
    layouts, _ = await client.list_raw(MIGLAYOUTS)
    notes: dict[str, str] = {}
    for decision in decide(plan, nodes, layouts, pci_ids):
        notes[decision.node] = decision.note
        if decision.body is None:
            continue
        try:
            await client.apply_object(MIGLAYOUTS, decision.body)
            log.info("planner MigLayout written", node=decision.node, layout=layout_name(decision.node))
        except KubeError as exc:
            log.warning("writing the planner MigLayout failed", node=decision.node, error=str(exc))
            notes[decision.node] = (
                f"not applied: writing MigLayout {layout_name(decision.node)} failed: {exc}"
            )
    return notes
