"""What ``gpudra explain`` prints for each claim: by default the sentence and a short table of the nearest nodes,
within 80 columns; ``-o wide`` everything (``gpudra.reports``: per-request numbers, closest devices, selectors,
the MIG planner's section); ``-o json`` the same as data. An allocated claim its driver could not prepare says
so, with the driver's reason. For a pod, :class:`PodNotes` come before and after its claims: the nodes its node
filters keep it off, and the kubelet's Warning where no driver said why. Exit status: 0 when every claim fits now
(or is allocated, prepared or not), 1 when one cannot fit."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpudra.allocator import Allocation, Explanation, Failure, NodesFailure, SelectorStat
from gpudra.api.dra import AllocationResult
from gpudra.mig import DemandPlan
from gpudra.planning.podnodes import KEPT_OFF_SHOWN, kept_off_title
from gpudra.planning.podscheduling import Unschedulable, gate_words
from gpudra.planning.preparestatus import (
    RETRY_WORDS,
    KubeletWarning,
    NotPrepared,
    kubelet_warning_words,
    not_prepared_words,
)
from gpudra.reports import allocation_table, mig_plan_report, outcome_report

WIDTH = 80
NEAREST = 5
"""Rows of the default output's node table."""
ALLOCATED, FITS, PENDING, STRANDED = "allocated", "fits", "pending", "stranded"
"""STRANDED: unallocated, and no scheduler will allocate it (``gpudra.planning.boundclaims``)."""


@dataclass(frozen=True)
class Answer:
    """One claim explained: allocated already, would fit now (``fitted``), or not (``explanation``), or left
    unallocated for good (``reason`` and ``words``)."""

    claim: str
    """namespace/name."""
    state: str
    allocation: AllocationResult | None = None
    fitted: Allocation | None = None
    explanation: Explanation | None = None
    plan: DemandPlan | None = None
    note: str = ""
    """Said before the answer (e.g. a template's claim that does not exist yet)."""
    reason: str = ""
    words: str = ""
    not_prepared: tuple[NotPrepared, ...] = ()
    """An allocated claim's devices that its driver could not prepare (``gpudra.planning.preparestatus``)."""

    @property
    def fits(self) -> bool:
        return self.state not in (PENDING, STRANDED)

    def _result(self) -> AllocationResult | None:
        return self.fitted.claims[0].result if self.fitted is not None else self.allocation

    def devices(self) -> list[dict[str, str]]:
        result = self._result()
        return [
            {"request": r.request, "driver": r.driver, "pool": r.pool, "device": r.device}
            for r in (result.results if result is not None else ())
        ]

    def node(self) -> str | None:
        result = self._result()
        return result.node if result is not None else None


def exit_status(answers: list[Answer]) -> int:
    return 0 if all(a.fits for a in answers) else 1


# ---------------------------------------------------------------- default: within 80 columns


def short_report(answer: Answer) -> RenderableType:
    parts: list[RenderableType] = []
    if answer.note:
        parts.append(Text(f"claim {answer.claim}: {answer.note}"))
    if answer.state == STRANDED:
        return Group(*parts, *_stranded(answer))
    if answer.state != PENDING:
        where = f" on node {answer.node()}" if answer.node() else ""
        style = "green" if answer.state == FITS else ""
        verb = "fits now" if answer.state == FITS else "is allocated"
        parts.append(Text(f"claim {answer.claim} {verb}{where}: {_devices(answer)}", style=style))
        return Group(*parts, *_not_prepared(answer))
    e = answer.explanation
    assert e is not None
    parts.append(Text(f"claim {answer.claim} does not fit ({e.reason})", style="bold red"))
    parts.append(Text(e.text()))
    if e.nodes:
        parts.append(_nearest(e))
    return Group(*parts)


def _stranded(answer: Answer) -> list[Text]:
    return [
        Text(f"claim {answer.claim} will not be allocated ({answer.reason})", style="bold red"),
        Text(answer.words),
    ]


def _not_prepared(answer: Answer) -> list[Text]:
    if not answer.not_prepared:
        return []
    lines = [Text(line, style="bold red") for line in not_prepared_words(answer.not_prepared)]
    return [*lines, Text(RETRY_WORDS)]


@dataclass(frozen=True)
class PodNotes:
    """What ``explain pod`` says of the pod itself, beside its claims: the scheduling gates that hold it
    (``gpudra.planning.podscheduling``), the nodes publishing devices that kube-scheduler's node filters keep it off
    (``gpudra.planning.podnodes``), and the kubelet's Warning that it could not prepare its claims
    (``gpudra.planning.preparestatus``)."""

    nodes: int = 0
    """Nodes that publish devices."""
    kept_off: Mapping[str, str] = field(default_factory=dict)
    """Node -> what keeps the pod off it."""
    kubelet: KubeletWarning | None = None
    gates: tuple[str, ...] = ()
    namespace: str = ""
    unschedulable: Unschedulable | None = None
    """kube-scheduler's word on the pod, said when every claim fits (what keeps the pod off is no device)."""

    def head(self, limit: int | None = KEPT_OFF_SHOWN) -> list[RenderableType]:
        """Said before the claims: the gates that hold the pod, the nodes it cannot go to (the first ``limit``;
        None: all)."""
        held: list[RenderableType] = []
        if self.gates:
            first, *rest = gate_words(self.gates, self.namespace)
            held = [Text(first, style="bold"), *(Text(line) for line in rest)]
        if not self.kept_off:
            return held
        named = sorted(self.kept_off.items())
        shown = named if limit is None else named[:limit]
        lines = [f"  {node}: {why}" for node, why in shown]
        if len(named) > len(shown):
            lines.append(f"  and {len(named) - len(shown)} more: -o wide")
        title = kept_off_title(len(self.kept_off), self.nodes)
        return [*held, Text(f"{title}:", style="bold"), *(Text(x) for x in lines)]

    def tail(self) -> list[RenderableType]:
        """Said after the claims: kube-scheduler's word on a pod whose claims fit, the kubelet's Warning where no
        claim's status says why the pod waits."""
        said: list[RenderableType] = []
        if self.unschedulable is not None:
            said.append(Text(self.unschedulable.words(), style="bold red"))
        if self.kubelet is not None:
            first, *rest = kubelet_warning_words(self.kubelet)
            said.append(Group(Text(first, style="bold red"), *(Text(line) for line in rest)))
        return said

    def data(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.gates:
            out["schedulingGates"] = list(self.gates)
        if self.kept_off:
            out["keptOff"] = [{"node": n, "reason": why} for n, why in sorted(self.kept_off.items())]
        if self.kubelet is not None:
            out["kubelet"] = asdict(self.kubelet)
        if self.unschedulable is not None:
            out["unschedulable"] = asdict(self.unschedulable)
        return out


def _devices(answer: Answer) -> str:
    names = [d["device"] for d in answer.devices()]
    return ", ".join(names) if names else "no devices"


def _nearest(e: Explanation) -> Table:
    out = Table(header_style="bold", box=None, pad_edge=False)
    out.add_column("NODE", overflow="fold", max_width=24)
    for column in ("NEED", "NOW", "WHEN FREED"):
        out.add_column(column, justify="right", no_wrap=True)
    out.add_column("WHY", overflow="fold", ratio=1)
    for n in e.nodes[:NEAREST]:
        out.add_row(n.node, str(n.need), str(n.now), str(n.later), n.words)
    more = len(e.nodes) - NEAREST
    if more > 0:
        out.caption = f"{more} more node{'s' if more > 1 else ''}: -o wide"
        out.caption_justify = "left"
    return out


# ---------------------------------------------------------------- -o wide: everything


def wide_report(answer: Answer, shipped: Collection[tuple[str, str]]) -> RenderableType:
    parts: list[RenderableType] = [Text(f"claim {answer.claim}: {answer.note}")] if answer.note else []
    if answer.allocation is not None:
        parts.append(allocation_table(f"claim {answer.claim} is allocated", answer.allocation))
        parts += _not_prepared(answer)
    elif answer.fitted is not None:
        parts.append(outcome_report(answer.fitted))
    elif answer.state == STRANDED:
        parts += _stranded(answer)
    elif answer.explanation is not None:
        parts.append(outcome_report(answer.explanation, shipped))
        section = mig_plan_report(answer.plan, answer.claim) if answer.plan is not None else None
        if section is not None:
            parts.append(section)
    return Group(*parts)


# ---------------------------------------------------------------- -o json


def answer_data(answer: Answer) -> dict[str, Any]:
    """Everything ``-o wide`` prints, as data."""
    data: dict[str, Any] = {"claim": answer.claim, "state": answer.state, "fits": answer.fits}
    if answer.note:
        data["note"] = answer.note
    if answer.state == STRANDED:
        return {**data, "reason": answer.reason, "text": answer.words}
    if answer.state != PENDING:
        data.update(node=answer.node(), devices=answer.devices())
        if answer.state == ALLOCATED:
            data["notPrepared"] = [asdict(d) for d in answer.not_prepared]
        return data
    e = answer.explanation
    assert e is not None
    failures = e.outcome.failures if isinstance(e.outcome, NodesFailure) else [e.outcome]
    data.update(e.as_dict())
    data["text"] = e.text()
    data["requests"] = [_request_data(f) for f in failures]
    data["mig"] = _mig_data(answer.plan, answer.claim) if answer.plan is not None else None
    return data


def _request_data(failure: Failure) -> dict[str, Any]:
    return {
        "node": failure.node,
        "reason": failure.reason,
        "message": failure.message,
        "requests": [
            {
                "claim": d.claim,
                "request": d.request,
                "reason": d.reason,
                "message": d.message,
                "need": d.needed,
                "devices": d.devices,
                "classKept": d.class_kept,
                "requestKept": d.request_kept,
                "free": d.free,
                "inUse": d.in_use,
                "tainted": d.tainted,
                "selectors": [_selector_data(s) for s in d.selectors],
            }
            for d in failure.requests
        ],
    }


def _selector_data(stat: SelectorStat) -> dict[str, Any]:
    return {"source": stat.source, "expression": stat.expression, "eliminated": stat.eliminated}


def _mig_data(plan: DemandPlan, claim: str) -> dict[str, Any] | None:
    gpus = plan.gpus_for(claim)
    reason = plan.reason_for(claim)
    if not gpus and reason is None:
        return None
    return {
        "impossible": reason,
        "gpus": [
            {
                "node": g.node,
                "gpu": g.gpu_index,
                "model": g.model_id,
                "now": str(g.current),
                "suggested": str(g.layout),
                "steps": g.describe(),
                "serves": list(g.claims),
            }
            for g in gpus
        ],
    }
