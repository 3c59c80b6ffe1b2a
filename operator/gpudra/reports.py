"""Rich renderings for the CLI: allocation outcomes (``gpudra explain``)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpudra.allocator.explain import Failure, NodesFailure, RequestDiagnosis, render_text
from gpudra.allocator.result import Allocation
from gpudra.api.resource import AllocationResult


def allocation_table(title: str, allocation: AllocationResult) -> Table:
    table = Table(title=title, header_style="bold")
    for column in ("REQUEST", "DRIVER", "POOL", "DEVICE"):
        table.add_column(column)
    for r in (allocation.devices.results if allocation.devices else None) or []:
        table.add_row(
            r.request, r.driver, r.pool, r.device + (f" (share {r.share_id})" if r.share_id else "")
        )
    return table


def _diagnosis_table(failures: list[Failure]) -> Table:
    table = Table(title="why not", header_style="bold")
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


def _selector_details(failures: list[Failure]) -> list[RenderableType]:
    out: list[RenderableType] = []
    for failure in failures:
        for d in failure.requests:
            for s in d.selectors:
                if s.eliminated:
                    out.append(Text(f"  {failure.node or '-'} {d.request}: {s.source} selector {s.expression!r} "
                                    f"eliminated {s.eliminated} device(s)"))  # fmt: skip
            for m in d.near_misses:
                out.append(Text(f"  closest: {m.device} fails only {m.expression!r}"))
            if d.constraint:
                values = ", ".join(f"{v}: {n}" for v, n in d.values.items())
                out.append(
                    Text(
                        f"  constraint {d.constraint}" + (f" (devices per value: {values})" if values else "")
                    )
                )
    return out


def outcome_report(outcome: Allocation | Failure | NodesFailure) -> RenderableType:
    if isinstance(outcome, Allocation):
        parts: list[RenderableType] = [Text(f"fits: node {outcome.node}", style="bold green")]
        parts.extend(allocation_table(f"claim {c.key}", c.result) for c in outcome.claims)
        return Group(*parts)
    failures = outcome.failures if isinstance(outcome, NodesFailure) else [outcome]
    parts = [Text("does not fit: " + render_text(outcome), style="bold red"), _diagnosis_table(failures)]
    parts.extend(_selector_details(failures))
    return Group(*parts)
