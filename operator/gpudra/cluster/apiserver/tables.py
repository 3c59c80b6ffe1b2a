"""The meta.k8s.io/v1 Table format kubectl asks for: built-in columns per resource and CRD printer columns."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gpudra.api.timestamps import parse_rfc3339

from .podtable import pod_cells
from .registry import PrinterColumn, ResourceType
from .workloadtable import deployment_cells, job_cells, node_wide_cells, replicaset_cells

Row = list[Any]
Column = tuple[str, str, str, int]  # name, type, format, priority
_AGE: Column = ("Age", "string", "", 0)
_NAME: Column = ("Name", "string", "name", 0)


def human_duration(seconds: float) -> str:
    """Kubernetes' short human duration: 5s, 3m20s, 4h, 2d4h, 30d, 2y10d."""
    if seconds < -1:
        return "<invalid>"
    s = max(int(seconds), 0)
    minutes, hours, days = s // 60, s // 3600, s // 86400
    if s < 120:
        return f"{s}s"
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years = days // 365
    if years < 8:
        return f"{years}y{days % 365}d"
    return f"{years}y"


def age(timestamp: Any) -> str:
    if not isinstance(timestamp, str) or not timestamp:
        return "<unknown>"
    try:
        then = parse_rfc3339(timestamp)
    except ValueError:
        return "<unknown>"
    return human_duration((datetime.now(UTC) - then).total_seconds())


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = obj.get("metadata") or {}
    return meta


def _created(obj: dict[str, Any]) -> str:
    return age(_meta(obj).get("creationTimestamp"))


def _claim_state(obj: dict[str, Any]) -> str:
    status = obj.get("status") or {}
    states = []
    if _meta(obj).get("deletionTimestamp"):
        states.append("deleted")
    states.append("allocated" if status.get("allocation") else "pending")
    if status.get("reservedFor"):
        states.append("reserved")
    return ",".join(states)


def _node_status(obj: dict[str, Any]) -> str:
    conditions = (obj.get("status") or {}).get("conditions") or ()
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    text = (
        "Unknown"
        if ready is None or ready.get("status") == "Unknown"
        else ("Ready" if ready.get("status") == "True" else "NotReady")
    )
    if (obj.get("spec") or {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    return text


def _node_roles(obj: dict[str, Any]) -> str:
    prefix = "node-role.kubernetes.io/"
    roles = sorted(k[len(prefix) :] for k in (_meta(obj).get("labels") or {}) if k.startswith(prefix))
    return ",".join(r for r in roles if r) or "<none>"


def _pod_cell(index: int) -> Callable[[dict[str, Any]], str]:
    return lambda obj: pod_cells(obj, age)[index]


def _pod_ip(obj: dict[str, Any]) -> str:
    ips = (obj.get("status") or {}).get("podIPs") or ()
    return str(ips[0].get("ip") or "<none>") if ips else "<none>"


def _readiness_gates(obj: dict[str, Any]) -> str:
    gates = (obj.get("spec") or {}).get("readinessGates") or ()
    if not gates:
        return "<none>"
    conditions = {c.get("type"): c.get("status") for c in (obj.get("status") or {}).get("conditions") or ()}
    return f"{sum(1 for g in gates if conditions.get(g.get('conditionType')) == 'True')}/{len(gates)}"


def _event_object(obj: dict[str, Any]) -> str:
    ref = obj.get("involvedObject") or obj.get("regarding") or {}
    return f"{str(ref.get('kind', '')).lower()}/{ref.get('name', '')}"


def _event_last_seen(obj: dict[str, Any]) -> str:
    return age(obj.get("lastTimestamp") or obj.get("eventTime") or _meta(obj).get("creationTimestamp"))


def _path(*keys: str) -> Callable[[dict[str, Any]], Any]:
    def get(obj: dict[str, Any]) -> Any:
        value: Any = obj
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return value if value is not None else "<none>"

    return get


Cell = Callable[[dict[str, Any]], Any]


def _cell(cells: Callable[[dict[str, Any], str], list[Any]], index: int) -> Cell:
    return lambda obj: cells(obj, _created(obj))[index]


def _workload_columns(
    cells: Callable[[dict[str, Any], str], list[Any]], columns: list[tuple[str, str]]
) -> list[tuple[Column, Cell]]:
    """A workload's columns (name, type) as kube-apiserver declares them, then AGE and the wide three."""
    declared = [*columns, ("Age", "string")]
    wide = [("Containers", "string"), ("Images", "string"), ("Selector", "string")]
    return [((name, kind, "", 0), _cell(cells, i)) for i, (name, kind) in enumerate(declared)] + [
        ((name, kind, "", 1), _cell(cells, len(declared) + i)) for i, (name, kind) in enumerate(wide)
    ]


def _job_cells(obj: dict[str, Any], created: str) -> list[Any]:
    return job_cells(obj, created, human_duration)


def _node_wide(index: int) -> Cell:
    return lambda obj: node_wide_cells(obj)[index]


_BUILTIN: dict[tuple[str, str], list[tuple[Column, Cell]]] = {
    ("resource.k8s.io", "resourceclaims"): [(("State", "string", "", 0), _claim_state), (_AGE, _created)],
    ("resource.k8s.io", "resourceslices"): [
        (("Node", "string", "", 0), _path("spec", "nodeName")),
        (("Driver", "string", "", 0), _path("spec", "driver")),
        (("Pool", "string", "", 0), _path("spec", "pool", "name")),
        (_AGE, _created),
    ],
    ("", "nodes"): [
        (("Status", "string", "", 0), _node_status),
        (("Roles", "string", "", 0), _node_roles),
        (_AGE, _created),
        (("Version", "string", "", 0), _path("status", "nodeInfo", "kubeletVersion")),
        *(
            ((name, "string", "", 1), _node_wide(i))
            for i, name in enumerate(
                ("Internal-IP", "External-IP", "OS-Image", "Kernel-Version", "Container-Runtime")
            )
        ),
    ],
    ("apps", "deployments"): _workload_columns(
        deployment_cells, [("Ready", "string"), ("Up-to-date", "string"), ("Available", "string")]
    ),
    ("apps", "replicasets"): _workload_columns(
        replicaset_cells, [("Desired", "integer"), ("Current", "integer"), ("Ready", "integer")]
    ),
    ("batch", "jobs"): _workload_columns(
        _job_cells, [("Status", "string"), ("Completions", "string"), ("Duration", "string")]
    ),
    ("", "pods"): [
        (("Ready", "string", "", 0), _pod_cell(0)),
        (("Status", "string", "", 0), _pod_cell(1)),
        (("Restarts", "string", "", 0), _pod_cell(2)),
        (_AGE, _created),
        (("IP", "string", "", 1), _pod_ip),
        (("Node", "string", "", 1), _path("spec", "nodeName")),
        (("Nominated Node", "string", "", 1), _path("status", "nominatedNodeName")),
        (("Readiness Gates", "string", "", 1), _readiness_gates),
    ],
    ("", "namespaces"): [(("Status", "string", "", 0), _path("status", "phase")), (_AGE, _created)],
    ("apiextensions.k8s.io", "customresourcedefinitions"): [
        (("Created At", "date", "", 0), lambda o: _meta(o).get("creationTimestamp")),
    ],
}
_EVENT_COLUMNS: list[tuple[Column, Cell]] = [
    (("Last Seen", "string", "", 0), _event_last_seen),
    (("Type", "string", "", 0), _path("type")),
    (("Reason", "string", "", 0), _path("reason")),
    (("Object", "string", "", 0), _event_object),
    (("Message", "string", "", 0), lambda o: o.get("message") or o.get("note") or ""),
]
_BUILTIN[("", "events")] = _EVENT_COLUMNS
_BUILTIN[("events.k8s.io", "events")] = _EVENT_COLUMNS


# ----------------------------------------------------------------------------- JSONPath subset
_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+|\*)\]|\[\?\(@\.([\w.]+)\s*==\s*[\"']([^\"']*)[\"']\)\]")


def jsonpath(obj: Any, path: str) -> list[Any]:
    """Evaluate ``.a.b``, ``.a[0].b``, ``.a[*].b`` and ``.a[?(@.type=="Ready")].status``: the matches."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    values = [obj]
    for m in _SEGMENT.finditer(path):
        name, index, key, expected = m.groups()
        nxt: list[Any] = []
        for value in values:
            if name is not None:
                if isinstance(value, dict) and name in value:
                    nxt.append(value[name])
            elif index is not None:
                if isinstance(value, list):
                    if index == "*":
                        nxt.extend(value)
                    elif int(index) < len(value):
                        nxt.append(value[int(index)])
            elif isinstance(value, list):
                nxt.extend(v for v in value if _lookup(v, key) == expected)
        values = nxt
    return values


def _lookup(value: Any, dotted: str) -> Any:
    for key in dotted.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return (
        str(value)
        if isinstance(value, str | int | float) and not isinstance(value, bool)
        else (("true" if value else "false") if isinstance(value, bool) else value)
    )


def _printer_cell(obj: dict[str, Any], column: PrinterColumn) -> Any:
    found = jsonpath(obj, column.json_path)
    if not found:
        return None
    value = found[0] if len(found) == 1 else ",".join(str(v) for v in found)
    if column.type == "date":
        return age(value)
    if column.type == "integer":
        return value if isinstance(value, int) else None
    if column.type == "number":
        return value if isinstance(value, int | float) else None
    if column.type == "boolean":
        return value if isinstance(value, bool) else None
    return value if isinstance(value, str) else json.dumps(value)


def _columns(rt: ResourceType) -> tuple[list[Column], list[Cell]]:
    if rt.printer_columns is not None:
        printer = list(rt.printer_columns)
        if not printer:
            return [_NAME, _AGE], [lambda o: _meta(o).get("name"), _created]
        cols: list[Column] = [_NAME]
        cells: list[Cell] = [lambda o: _meta(o).get("name")]
        for pc in printer:
            kind = "string" if pc.type == "date" else pc.type
            cols.append((pc.name, kind, pc.format, pc.priority))
            cells.append(lambda o, pc=pc: _printer_cell(o, pc))  # type: ignore[misc]
        return cols, cells
    spec = _BUILTIN.get(rt.storage_key, [(_AGE, _created)])
    return [_NAME] + [c for c, _ in spec], [lambda o: _meta(o).get("name")] + [f for _, f in spec]


def partial_metadata(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata", {}),
    }


def table(
    rt: ResourceType, objects: list[dict[str, Any]], resource_version: str, include_object: str = "Metadata"
) -> dict[str, Any]:
    """A meta.k8s.io/v1 Table of ``objects``; ``include_object`` is Object, Metadata or None."""
    cols, cells = _columns(rt)
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": [f(obj) for f in cells]}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = partial_metadata(obj)
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": [
            {"name": name, "type": kind, "format": fmt, "description": name, "priority": priority}
            for name, kind, fmt, priority in cols
        ],
        "rows": rows,
    }
