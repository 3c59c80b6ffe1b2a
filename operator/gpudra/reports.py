"""Rich renderings for the CLI: the fleet (``gpudra status``, ``gpudra up``) and allocation outcomes
(``gpudra explain``). Read through the API, so they show what any client of the cluster would see."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpudra.allocator.explain import Failure, NodesFailure, RequestDiagnosis
from gpudra.allocator.explanation import Explanation
from gpudra.allocator.result import Allocation
from gpudra.api.resource import AllocationResult
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import NODES, RESOURCE_CLAIMS, RESOURCE_SLICES
from gpudra.mig.demand import DemandPlan

PROFILE_LABEL = "gpudra.dev/node-profile"


def _attr(device: dict[str, Any], name: str) -> str:
    value = (device.get("attributes") or {}).get(name) or {}
    return str(next(iter(value.values()), ""))


async def fleet_table(client: KubeClient, driver: str = "gpu.nvidia.com") -> Table:
    """Nodes, GPUs, MIG devices, published slices, allocated devices and unhealthy (tainted) devices."""
    nodes, _ = await client.list(NODES)
    slices, _ = await client.list(RESOURCE_SLICES, field_selector=f"spec.driver={driver}")
    claims, _ = await client.list(RESOURCE_CLAIMS)
    per_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    slice_names: dict[str, list[str]] = defaultdict(list)
    for s in slices:
        node = s["spec"].get("nodeName", "")
        per_node[node].extend(s["spec"].get("devices") or [])
        slice_names[node].append(s["metadata"]["name"])
    allocated: Counter[str] = Counter()
    for claim in claims:
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results"
        ) or []
        allocated.update(r["pool"] for r in results if r.get("driver") == driver)

    table = Table(title="gpudra fleet", header_style="bold")
    for column in ("NODE", "PROFILE", "GPU MODEL", "GPUS", "MIG DEVICES", "DEVICES", "ALLOCATED", "UNHEALTHY",
                   "SLICES"):  # fmt: skip
        table.add_column(column)
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        name = node["metadata"]["name"]
        devices = per_node.get(name, [])
        gpus = {_attr(d, "uuid") for d in devices if _attr(d, "type") == "gpu"}
        gpus |= {_attr(d, "parentUUID") for d in devices if _attr(d, "type") == "mig"}
        models = sorted({_attr(d, "productName") for d in devices} - {""})
        migs = [d for d in devices if _attr(d, "type") == "mig"]
        profiles = Counter(_attr(d, "profile") for d in migs if not d.get("consumesCounters"))
        dynamic = {_attr(d, "parentUUID") for d in migs if d.get("consumesCounters")}
        mig_text = [f"{n}x {p}" for p, n in sorted(profiles.items())]
        mig_text += [f"dynamic on {len(dynamic)} GPU{'s' if len(dynamic) > 1 else ''}"] if dynamic else []
        unhealthy = sum(1 for d in devices if any(t.get("effect") != "None" for t in d.get("taints") or []))
        table.add_row(
            name,
            (node["metadata"].get("labels") or {}).get(PROFILE_LABEL, "-"),
            ", ".join(models) or "-",
            str(len(gpus)),
            ", ".join(mig_text) or "-",
            str(len(devices)),
            str(allocated.get(name, 0)),
            str(unhealthy),
            ", ".join(sorted(slice_names.get(name, []))) or "-",
        )
    return table


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
