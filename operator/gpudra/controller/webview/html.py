"""HTML of the web view, drawn from the pure cards of ``gpudra.planning``: one fragment per node, pending (or
unprepared) claim, namespace of claims, ComputeDomain and MigLayout, each with a stable ``data-frag`` id the page's
script replaces in place when the server sends a new version of it. Every value from the cluster goes through
``escape``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from importlib import resources

from gpudra.allocator import NodeLine
from gpudra.planning.fleetview import GpuCard, MigGeometry, MigSlot, NodeCard
from gpudra.planning.workloads import (
    ClaimDevice,
    ClaimRow,
    ConditionView,
    DomainCard,
    LayoutCard,
    PendingCard,
)

WHY_ROWS_SHOWN = 16
"""Nodes of a pending claim's table shown before the rest fold away (a 500-node fleet has 500)."""
CLOSEST_SHOWN = 5

SECTIONS: tuple[tuple[str, str], ...] = (
    ("summary", ""),
    ("pending", "Pending claims"),
    ("nodes", "Nodes and GPUs"),
    ("claims", "Claims by namespace"),
    ("domains", "ComputeDomains"),
    ("layouts", "MigLayouts"),
)


LEGEND = (
    '<div class="legend"><span><i class="l-free"></i>GPU free</span><span><i class="l-held"></i>allocated</span>'
    '<span><i class="l-idle"></i>MIG instance, free</span><span><i class="l-slot"></i>slice not carved</span>'
    '<span><i class="l-bad"></i>unhealthy</span><span><i class="l-bad-held"></i>unhealthy and allocated</span>'
    "<span>MIG GPUs to scale: memory slices above, compute slices below; the pods holding GPUs are named under "
    "them, hover for placement</span></div>"
)

ICON = (
    "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E"
    "%3Crect width='16' height='16' rx='3' fill='%231d232b'/%3E%3Crect x='3' y='3' width='4' height='4' "
    "fill='%233b6fd8'/%3E%3Crect x='9' y='3' width='4' height='4' fill='%23b9d3b0'/%3E%3Crect x='3' y='9' "
    "width='4' height='4' fill='%23b9d3b0'/%3E%3Crect x='9' y='9' width='4' height='4' fill='%233b6fd8'/%3E%3C/svg%3E"
)
"""The page's icon, inline: a browser asks for /favicon.ico otherwise, and gets a 404."""


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _gib(value: int) -> str:
    return f"{value / 2**30:.0f} GiB" if value else "?"


def _frag(kind: str, key: str, css: str, body: str, **data: str) -> str:
    attrs = "".join(f' data-{name}="{_e(value)}"' for name, value in data.items())
    return f'<div class="{css}" data-frag="{_e(kind)}/{_e(key)}"{attrs}>{body}</div>'


# ---------------------------------------------------------------- nodes and GPUs


def _held_by(holder: str, user: str | None) -> str:
    """``held by ns/claim``, with the pods it is reserved for when they are not in the claim's name already."""
    return f"held by {holder}" + (f" (pod {user})" if user and user != holder.rpartition("/")[2] else "")


def _short(holder: str | None, user: str | None) -> str:
    """How a holder is named on the page: its pods, or the claim's name without its namespace."""
    return user or (holder or "").rpartition("/")[2]


def _slot_title(slot: MigSlot) -> str:
    last_memory, last_compute = slot.start + slot.size - 1, slot.start + slot.compute - 1
    holder = _held_by(slot.holder, slot.user) if slot.holder else "free"
    unhealthy = ", unhealthy" if slot.unhealthy else ""
    return f"{slot.device}: memory {slot.start}-{last_memory}, compute {slot.start}-{last_compute}, {holder}{unhealthy}"


def _mig(gpu: GpuCard, mig: MigGeometry) -> str:
    """The GPU to scale: its memory slices as columns (the lines between them drawn by the stylesheet), its
    compute slices as a strip below (slice i under slice i; the columns past the last compute slice greyed), and
    each instance one block over the memory slices it occupies, its compute slices the coloured part of the
    strip. One element per instance: a 500-node fleet stays a light page."""
    blocks = []
    for slot in mig.instances:
        state = "bad" if slot.unhealthy else "held" if slot.holder else "idle"
        compute_part, _, memory_part = slot.profile.partition(".")
        label = _e(slot.profile) if slot.size > 1 else f"{_e(compute_part)}<br>{_e(memory_part)}"
        holder = (
            f"<small>{_e(_short(slot.holder, slot.user))}</small>" if slot.holder and slot.size > 1 else ""
        )
        held_by = f' data-holder="{_e(slot.holder)}"' if slot.holder else ""
        compute = max(1, min(slot.compute, mig.compute_slices - slot.start))
        blocks.append(
            f'<i class="inst {state}" style="grid-column:{slot.start + 1}/span {slot.size};'
            f'--c:{100 * compute / slot.size:.0f}%" title="{_e(_slot_title(slot))}" data-profile="{_e(slot.profile)}"'
            f' data-start="{slot.start}" data-size="{slot.size}" data-compute="{compute}"{held_by}>{label}{holder}</i>'
        )
    kind = "dynamic MIG: instances carved for claims" if mig.dynamic else "MIG"
    free = f"{mig.free_memory_slices} of {mig.memory_slices} memory slices free"
    title = _e(f"{gpu.name} · {gpu.model} · {_gib(gpu.memory_bytes)} · {kind} · {free}")
    return (
        f'<div class="mig{" dyn" if mig.dynamic else ""} {gpu.state}" data-gpu="{_e(gpu.name)}" title="{title}" '
        f'style="--slices:{mig.memory_slices};--compute:{mig.compute_slices}">'
        f'<span class="idx">{gpu.minor}{" dyn" if mig.dynamic else ""}</span>'
        f'<div class="slots">{"".join(blocks)}</div></div>'
    )


def _gpu(gpu: GpuCard) -> str:
    if gpu.mig is not None and gpu.holder is None:
        return _mig(gpu, gpu.mig)
    parts = [gpu.name, gpu.model, _gib(gpu.memory_bytes)]
    parts.append(_held_by(gpu.holder, gpu.user) if gpu.holder else gpu.state)
    parts += [f"taint {t}" for t in gpu.taints]
    held = (
        " held" if gpu.holder and gpu.unhealthy else ""
    )  # unhealthy and allocated: drawn apart from a free one
    return (
        f'<span class="gpu {gpu.state}{held}" data-gpu="{_e(gpu.name)}" title="{_e(" · ".join(parts))}">'
        f"{gpu.minor}</span>"
    )


def _users(gpus: Sequence[GpuCard]) -> str:
    """Who holds the node's whole GPUs, readable without hovering: ``0 1 train · 3 infer-abc``."""
    minors: dict[str, list[int]] = {}
    for gpu in gpus:
        if gpu.holder:
            minors.setdefault(_short(gpu.holder, gpu.user), []).append(gpu.minor)
    if not minors:
        return ""
    items = (
        f"<span><b>{' '.join(str(m) for m in found)}</b> {_e(user)}</span>" for user, found in minors.items()
    )
    return f'<div class="users">{"".join(items)}</div>'


def _tally(gpus: Sequence[GpuCard]) -> list[tuple[int, str]]:
    """The counts a page shows, as its tiles draw them: free (and healthy), partly held, held (unhealthy ones
    too: they are drawn held), unhealthy (held or not)."""
    return [
        (sum(1 for g in gpus if g.state == "free"), "free"),
        (sum(1 for g in gpus if g.held == "partial"), "partly held"),
        (sum(1 for g in gpus if g.held == "allocated"), "held"),
        (sum(1 for g in gpus if g.unhealthy), "unhealthy"),
    ]


def node_fragment(card: NodeCard) -> str:
    models = sorted({g.model for g in card.gpus if g.model})
    counts = [f"{len(card.gpus)} GPU{'s' if len(card.gpus) != 1 else ''}"]
    counts += [f"{n} {label}" for n, label in _tally(card.gpus) if n]
    badges = "" if card.ready else '<span class="badge bad">NotReady</span>'
    badges += '<span class="badge warn">cordoned</span>' if card.unschedulable else ""
    badges += "".join(f'<span class="badge warn taint">{_e(t)}</span>' for t in card.taints)
    other = f" · {card.other_devices} other devices" if card.other_devices else ""
    body = (
        f'<div class="nh"><b>{_e(card.name)}</b> <span class="muted">{_e(card.profile)}</span>{badges}</div>'
        f'<div class="nm">{_e(", ".join(models) or "no GPUs published")} · {", ".join(counts)}{other}</div>'
        f'<div class="gpus">{"".join(_gpu(g) for g in card.gpus)}</div>{_users(card.gpus)}'
    )
    wide = " wide" if any(g.mig is not None for g in card.gpus) else ""
    return _frag("node", card.name, "node" + wide, body, node=card.name)


def _counted(n: int, one: str, many: str) -> tuple[int, str]:
    return n, one if n == 1 else many


def summary_fragment(nodes: Sequence[NodeCard], pending: int, claims: int, unprepared: int = 0) -> str:
    """The fleet's counts; ``unprepared`` (allocated claims their driver could not prepare, listed with the
    pending ones) only when there are any."""
    gpus = [g for n in nodes for g in n.gpus]
    instances = sum(len(g.mig.instances) for g in gpus if g.mig is not None)
    items = [
        _counted(len(nodes), "node", "nodes"),
        _counted(len(gpus), "GPU", "GPUs"),
        *_tally(gpus),
        _counted(instances, "MIG instance", "MIG instances"),
        _counted(claims, "claim", "claims"),
        (pending, "pending"),
        *([(unprepared, "not prepared")] if unprepared else []),
    ]
    body = "".join(
        f'<span class="stat" data-stat="{_e(label)}"><b>{n}</b> {_e(label)}</span>' for n, label in items
    )
    return _frag("summary", "fleet", "stats", body)


# ---------------------------------------------------------------- claims


def _condition(view: ConditionView | None) -> str:
    if view is None:
        return '<span class="muted">-</span>'
    css = "ok" if view.status == "True" else "bad"
    title = _e(f"{view.reason}: {view.message}" if view.message else view.reason)
    return f'<span class="cond {css}" title="{title}">{_e(view.status)}</span>'


def _device_row(device: ClaimDevice) -> str:
    return (
        f"<td>{_e(device.request)}</td><td>{_e(device.pool)}/{_e(device.device)}</td>"
        f"<td>{_condition(device.ready)}</td><td>{_condition(device.healthy)}</td>"
    )


def _claim_rows(row: ClaimRow) -> str:
    pods = _e(", ".join(row.pods)) or '<span class="muted">-</span>'
    head = f'<td rowspan="{max(1, len(row.devices))}">'
    first = (
        f'<tr data-claim="{_e(row.name)}">{head}{_e(row.name)}</td>{head}'
        f'<span class="state {row.state}">{row.state}</span></td>{head}{pods}</td>'
    )
    if not row.devices:
        return first + '<td colspan="4" class="muted">no devices allocated</td></tr>'
    lines = [first + _device_row(row.devices[0]) + "</tr>"]
    lines += [f"<tr>{_device_row(d)}</tr>" for d in row.devices[1:]]
    return "".join(lines)


def namespace_fragment(namespace: str, rows: Sequence[ClaimRow]) -> str:
    body = (
        f'<h3>{_e(namespace)} <span class="muted">{len(rows)} claim{"s" if len(rows) != 1 else ""}</span></h3>'
        '<div class="scroll"><table><tr><th>CLAIM</th><th>STATE</th><th>PODS</th><th>REQUEST</th><th>DEVICE</th>'
        f"<th>READY</th><th>HEALTHY</th></tr>{''.join(_claim_rows(r) for r in rows)}</table></div>"
    )
    return _frag("ns", namespace, "card", body, namespace=namespace)


def _node_line(line: NodeLine) -> str:
    cells = [line.node, line.reason, line.need, line.now, line.later]
    return (
        "<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + f'<td class="msg">{_e(line.words)}</td></tr>'
    )


def pending_fragment(card: PendingCard) -> str:
    """A pending claim as ``gpudra explain`` tells it, folded to its line (name, reason, the Event's first
    sentence): unfolded, the other sentences, the nodes nearest first (the first rows; the rest fold away), the
    closest devices."""
    key = f"{card.namespace}/{card.name}"
    reason = f' <span class="reason">{_e(card.reason)}</span>' if card.reason else ""
    parts = [f'<summary><b>{_e(key)}</b>{reason} <span class="headline">{_e(card.headline)}</span></summary>']
    parts += [f'<p class="sentence">{_e(sentence)}</p>' for sentence in card.sentences]
    if card.nodes:
        head = "<tr><th>NODE</th><th>REASON</th><th>NEED</th><th>NOW</th><th>WHEN FREED</th><th>WHY</th></tr>"
        shown, rest = card.nodes[:WHY_ROWS_SHOWN], card.nodes[WHY_ROWS_SHOWN:]
        rows = "".join(_node_line(n) for n in shown)
        parts.append(f'<div class="scroll"><table class="why">{head}{rows}</table></div>')
        if rest:
            parts.append(
                f"<details><summary>{len(rest)} more nodes</summary>"
                f'<div class="scroll"><table class="why">{head}{"".join(_node_line(n) for n in rest)}</table></div>'
                "</details>"
            )
    if card.closest:
        items = [f"<li>{_e(c.node)}/{_e(c.device)} ({_e(c.kind)}): {_e(c.miss)}</li>" for c in card.closest]
        parts += _folded_list("closest devices", items)
    if card.kept_off:
        items = [f"<li>{_e(node)}: {_e(why)}</li>" for node, why in card.kept_off]
        parts += _folded_list("nodes its pod cannot go to (kube-scheduler's node filters)", items)
    body = f"<details>{''.join(parts)}</details>"  # folded: one line per claim above the fleet
    return _frag("pending", key, "card pending", body, claim=key, reason=card.reason)


def _folded_list(title: str, items: Sequence[str]) -> list[str]:
    """A titled list of ``<li>`` items, the first ``CLOSEST_SHOWN`` shown and the rest folded away."""
    parts = [f'<p class="muted">{_e(title)}</p><ul class="closest">{"".join(items[:CLOSEST_SHOWN])}</ul>']
    if items[CLOSEST_SHOWN:]:
        more = "".join(items[CLOSEST_SHOWN:])
        summary = f"<summary>{len(items) - CLOSEST_SHOWN} more</summary>"
        parts.append(f'<details>{summary}<ul class="closest">{more}</ul></details>')
    return parts


# ---------------------------------------------------------------- ComputeDomains and MigLayouts


def _problems(conditions: Iterable[ConditionView]) -> str:
    return "".join(
        f'<p class="problem"><b>{_e(c.type)}={_e(c.status)}</b> {_e(c.reason)}: {_e(c.message)}</p>'
        for c in conditions
    )


def domain_fragment(card: DomainCard) -> str:
    key = f"{card.namespace}/{card.name}"
    css = "ok" if card.status == "Ready" else "bad"
    wanted = f" · numNodes {card.num_nodes}" if card.num_nodes else ""
    rows = "".join(
        f"<tr><td>{_e(n.name)}</td><td>{_e(n.clique or '-')}</td><td>{_e('' if n.index is None else n.index)}</td>"
        f'<td><span class="cond {"ok" if n.status == "Ready" else "bad"}">{_e(n.status)}</span></td>'
        f'<td class="msg">{_e(n.reason)}</td></tr>'
        for n in card.nodes
    )
    cliques = "".join(
        f"<li>clique <b>{_e(clique)}</b>: "
        + ", ".join(
            f"{_e(d.node)} #{_e('?' if d.index is None else d.index)} "
            f'<span class="cond {"ok" if d.status == "Ready" else "bad"}" title="{_e(d.message)}">{_e(d.status)}</span>'
            for d in daemons
        )
        + "</li>"
        for clique, daemons in card.cliques
    )
    body = (
        f'<h3>{_e(key)} <span class="cond {css}">{_e(card.status)}</span>'
        f' <span class="muted">{len(card.nodes)} nodes{wanted}</span></h3>'
        f"{_problems(card.problems)}"
        + (
            '<div class="scroll"><table><tr><th>NODE</th><th>CLIQUE</th><th>INDEX</th><th>STATUS</th>'
            f"<th>WHY NOT READY</th></tr>{rows}</table></div>"
            if rows
            else '<p class="muted">no nodes yet: nodes join as the workload\'s pods land on them</p>'
        )
        + (f'<ul class="cliques">{cliques}</ul>' if cliques else "")
    )
    return _frag("domain", key, "card", body, domain=key, status=card.status)


def layout_fragment(card: LayoutCard) -> str:
    states = ", ".join(f"{n} {s}" for s, n in sorted(card.states.items()))
    rows = "".join(
        f'<tr data-node="{_e(n.name)}"><td>{_e(n.name)}</td><td><span class="lstate {_e(n.state)}">{_e(n.state)}'
        f'</span></td><td class="msg">{_e(n.message)}</td><td>{_e(", ".join(n.blocked_by))}</td></tr>'
        for n in card.nodes
    )
    problems = _problems(c for c in card.conditions if c.type == "Invalid" and c.status == "True")
    body = (
        f'<h3>{_e(card.name)} <span class="muted">{_e(card.policy)} · {_e(card.source)} · applied '
        f"{_e(card.applied)}{' · ' + _e(states) if states else ''}</span></h3>{problems}"
        '<div class="scroll"><table><tr><th>NODE</th><th>STATE</th><th>MESSAGE</th><th>BLOCKED BY</th></tr>'
        f"{rows}</table></div>"
    )
    return _frag("layout", card.name, "card", body, layout=card.name)


# ---------------------------------------------------------------- the page


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


STYLE = _asset("webview.css")
SCRIPT = _asset("webview.js")


def page(sections: Mapping[str, Mapping[str, str]], version: int, title: str = "gpudra fleet") -> str:
    """The whole page: every section's fragments in order, the style and the live script."""
    nav = "".join(f'<a href="#s-{key}">{_e(label)}</a>' for key, label in SECTIONS if label)
    body = []
    for key, label in SECTIONS:
        fragments = sections.get(key, {})
        heading = f"<h2>{_e(label)}</h2>" if label else ""
        heading += LEGEND if key == "nodes" else ""
        empty = " empty" if not fragments else ""
        body.append(
            f'<section id="s-{key}" class="{key}{empty}">{heading}'
            f'<div class="frags" id="{key}">{"".join(fragments.values())}</div></section>'
        )
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="icon" href="{ICON}">'
        f"<style>{STYLE}</style></head>"
        f'<body data-version="{version}"><header><h1>gpudra</h1><nav>{nav}</nav>'
        '<span id="live" class="live" title="updates arrive as the cluster changes">connecting</span></header>'
        f"<main>{''.join(body)}</main><script>{SCRIPT}</script></body></html>"
    )
