"""Rich renderings for the CLI: the fleet (``gpudra status``, ``gpudra up``) and allocation outcomes
(``gpudra explain``). Read through the API, so they show what any client of the cluster would see."""

from __future__ import annotations

from collections.abc import Collection

from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from gpudra.allocator import Allocation, Explanation, Failure, NodesFailure, RequestDiagnosis
from gpudra.api.dra import AllocationResult
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import NODES, RESOURCE_CLAIMS, RESOURCE_SLICES
from gpudra.mig import DemandPlan
from gpudra.planning.summaries import PROFILE_LABEL as PROFILE_LABEL  # cluster/fleet.py labels nodes with it
from gpudra.planning.summaries import FleetRow, fleet_rows


def table(*columns: str, title: str | None = None) -> Table:
    """A kubectl-like table: no borders, bold headers, cells folded (never cut with an ellipsis) when the
    terminal is too narrow."""
    out = Table(title=title, header_style="bold", box=None, pad_edge=False)
    for column in columns:
        out.add_column(column, overflow="fold", min_width=min(len(column), 12))
    return out


def print_fitted(console: Console, renderable: RenderableType) -> None:
    """Print so nothing is cut: on a terminal, fitted to its width (long cells fold inside their row); without
    one (a pipe, a file, CI logs), at the width the content needs, every value in full."""
    if console.is_terminal:
        console.print(renderable)
        return
    needed = Measurement.get(console, console.options.update_width(100_000), renderable).maximum
    width = console.width
    console.width = max(needed, 1)
    try:
        console.print(renderable, crop=False)
    finally:
        console.width = width


async def list_fleet(client: KubeClient, driver: str = "gpu.nvidia.com") -> list[FleetRow]:
    """The fleet as any client of the cluster sees it."""
    nodes, _ = await client.list(NODES)
    slices, _ = await client.list(RESOURCE_SLICES, field_selector=f"spec.driver={driver}")
    claims, _ = await client.list(RESOURCE_CLAIMS)
    return fleet_rows(nodes, slices, claims, driver)


def fleet_table(rows: list[FleetRow], *, wide: bool = False, title: str | None = "gpudra fleet") -> Table:
    """Nodes, GPUs by model, MIG devices, allocated and unhealthy (tainted) devices; ``wide`` adds the node
    profile (simulated nodes), the published devices and slices. A cell with several values holds one a line."""
    columns = ["NODE", *(["PROFILE"] if wide else []), "GPUS", "MIG DEVICES", "ALLOCATED", "UNHEALTHY"]
    out = table(*columns, *(["DEVICES", "SLICES"] if wide else []), title=title)
    for row in rows:
        gpus, migs = "\n".join(row.gpu_text()) or "-", "\n".join(row.mig_text()) or "-"
        counts = [str(row.allocated), str(row.unhealthy)]
        if wide:
            out.add_row(
                row.node, row.profile, gpus, migs, *counts, str(row.devices), "\n".join(row.slices) or "-"
            )
        else:
            out.add_row(row.node, gpus, migs, *counts)
    return out


def allocation_table(title: str, allocation: AllocationResult) -> Table:
    table = Table(title=title, header_style="bold")
    for column in ("REQUEST", "DRIVER", "POOL", "DEVICE"):
        table.add_column(column)
    for r in (allocation.devices.results if allocation.devices else None) or []:
        table.add_row(
            r.request, r.driver, r.pool, r.device + (f" (share {r.share_id})" if r.share_id else "")
        )
    return table


def _nodes_table(explanation: Explanation) -> Table:
    table = Table(title="nodes, nearest first", header_style="bold")
    for column in ("NODE", "REASON", "NEED", "NOW", "WHEN FREED", "WHY"):
        table.add_column(column)
    for n in explanation.nodes:
        table.add_row(n.node, n.reason, str(n.need), str(n.now), str(n.later), n.words)
    return table


def _diagnosis_table(failures: list[Failure]) -> Table:
    table = Table(title="why not, per request", header_style="bold")
    for column in ("NODE", "CLAIM", "REQUEST", "REASON", "NEED", "DEVICES", "CLASS KEPT", "REQUEST KEPT", "FREE",
                   "IN USE", "TAINTED"):  # fmt: skip
        table.add_column(column)
    for failure in failures:
        rows: list[RequestDiagnosis] = failure.requests or [RequestDiagnosis("-", "-", failure.reason)]
        for d in rows:
            table.add_row(
                failure.node or "(any)", d.claim, d.request, d.reason, str(d.needed), str(d.devices),
                str(d.class_kept), str(d.request_kept), str(d.free), str(d.in_use), str(d.tainted),
            )  # fmt: skip
    return table


def _closest_table(explanation: Explanation) -> Table:
    table = Table(title="closest devices", header_style="bold")
    for column in ("NODE", "DEVICE", "KIND", "MISSES"):
        table.add_column(column)
    for c in explanation.closest:
        table.add_row(c.node, c.device, c.kind, c.miss)
    return table


def _selector_details(failures: list[Failure], shipped: Collection[tuple[str, str]]) -> list[RenderableType]:
    """Selectors that eliminated devices. A class gpudra ships is named, not quoted, unless it is why the node
    has no match (it left out devices that the request's own selectors would take)."""
    out: list[RenderableType] = []
    for failure in failures:
        for d in failure.requests:
            class_is_reason = d.request_kept == 0 and d.class_only > 0
            for s in d.selectors:
                if not s.eliminated:
                    continue
                source = s.source.removeprefix("class ")
                if (source, s.expression) in shipped and not class_is_reason:
                    what = s.source
                else:
                    what = f"{s.source} selector {s.expression!r}"
                out.append(
                    Text(f"  {failure.node or '-'} {d.request}: {what} eliminated {s.eliminated} device(s)")
                )
            if d.constraint:
                values = ", ".join(f"{v}: {n}" for v, n in d.values.items())
                out.append(
                    Text(
                        f"  constraint {d.constraint}" + (f" (devices per value: {values})" if values else "")
                    )
                )
    return out


def outcome_report(
    outcome: Allocation | Explanation, shipped: Collection[tuple[str, str]] = ()
) -> RenderableType:
    """``gpudra explain``: where the claim fits, or the explanation the Event carries (same words) followed by
    the nodes nearest first, the per-request numbers in that order, the closest devices and the selectors.
    ``shipped``: (class name, selector) of the DeviceClasses gpudra installs."""
    if isinstance(outcome, Allocation):
        parts: list[RenderableType] = [Text(f"fits: node {outcome.node}", style="bold green")]
        parts.extend(allocation_table(f"claim {c.key}", c.result) for c in outcome.claims)
        return Group(*parts)
    result = outcome.outcome
    failures = result.failures if isinstance(result, NodesFailure) else [result]
    order = {n.node: i for i, n in enumerate(outcome.nodes)}
    failures = sorted(failures, key=lambda f: order.get(f.node or "", len(order)))
    parts = [Text(f"does not fit ({outcome.reason}): {outcome.headline}", style="bold red")]
    parts += [Text(f"  {sentence}") for sentence in outcome.sentences]
    if outcome.nodes:
        parts.append(_nodes_table(outcome))
    parts.append(_diagnosis_table(failures))
    if outcome.closest:
        parts.append(_closest_table(outcome))
    parts.extend(_selector_details(failures, shipped))
    return Group(*parts)


MIG_SECTION = "MIG repartition that would satisfy this claim"


def mig_plan_report(plan: DemandPlan, claim: str) -> RenderableType | None:
    """The planner's section of ``gpudra explain`` for one claim (None when the claim is not a MIG claim)."""
    gpus = plan.gpus_for(claim)
    reason = plan.reason_for(claim)
    node = plan.placed.get(claim)
    if not gpus and reason is None and node is None:
        return None
    parts: list[RenderableType] = [Text(MIG_SECTION, style="bold")]
    if reason is not None:
        parts.append(Text(f"  none: {reason}"))
    elif not gpus:
        parts.append(Text(f"  none needed: free MIG instances on node {node} can serve it"))
    else:
        table = Table(header_style="bold")
        for column in ("NODE", "GPU", "MODEL", "NOW", "SUGGESTED", "STEPS", "SERVES"):
            table.add_column(column)
        for g in gpus:
            table.add_row(g.node, str(g.gpu_index), g.model_id, str(g.current), str(g.layout), g.describe(),
                          ", ".join(g.claims))  # fmt: skip
        parts += [
            table,
            Text(
                "  instances in use are kept; apply it with a MigLayout, or let the controller do it "
                "(GPUDRA_MIG_PLANNER=apply)"
            ),
        ]
    return Group(*parts)
