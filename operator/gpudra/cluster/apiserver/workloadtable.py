"""The cells kube-apiserver's printers give Deployments, ReplicaSets and Jobs, and the wide cells of Nodes.

Built as the server builds them for ``kubectl get -o wide`` (the server always sends the wide columns; kubectl
hides those of priority 1 unless asked): READY ``ready/desired``, UP-TO-DATE and AVAILABLE of a Deployment;
DESIRED, CURRENT and READY of a ReplicaSet; STATUS, COMPLETIONS and DURATION of a Job; the containers, images and
selector of each; INTERNAL-IP, EXTERNAL-IP, OS-IMAGE, KERNEL-VERSION and CONTAINER-RUNTIME of a Node.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gpudra.api.timestamps import parse_rfc3339

Cells = Callable[[dict[str, Any]], list[Any]]


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def selector_text(selector: Any) -> str:
    """A label selector as Kubernetes' ``labels.Selector.String()`` writes it: requirements sorted by key,
    ``k=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k``; ``<none>`` for an empty selector."""
    if not isinstance(selector, dict):
        return "<none>"
    requirements: list[tuple[str, str]] = []
    for key, value in (selector.get("matchLabels") or {}).items():
        requirements.append((str(key), f"{key}={value}"))
    for expression in selector.get("matchExpressions") or []:
        key, operator = str(expression.get("key", "")), expression.get("operator")
        values = ",".join(sorted(str(v) for v in expression.get("values") or []))
        text = {
            "In": f"{key} in ({values})",
            "NotIn": f"{key} notin ({values})",
            "Exists": key,
            "DoesNotExist": f"!{key}",
        }.get(str(operator))
        if text is None:
            return "<invalid>"
        requirements.append((key, text))
    return ",".join(text for _, text in sorted(requirements)) or "<none>"


def _template_cells(obj: dict[str, Any]) -> list[str]:
    """CONTAINERS, IMAGES and SELECTOR of a workload."""
    spec = obj.get("spec") or {}
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    names = ",".join(str(c.get("name", "")) for c in containers)
    images = ",".join(str(c.get("image", "")) for c in containers)
    return [names, images, selector_text(spec.get("selector"))]


def deployment_cells(obj: dict[str, Any], age: str) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    ready = f"{_int(status.get('readyReplicas'))}/{_int(spec.get('replicas'), 1)}"
    updated, available = _int(status.get("updatedReplicas")), _int(status.get("availableReplicas"))
    return [ready, updated, available, age, *_template_cells(obj)]


def replicaset_cells(obj: dict[str, Any], age: str) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    desired, current = _int(spec.get("replicas"), 1), _int(status.get("replicas"))
    return [desired, current, _int(status.get("readyReplicas")), age, *_template_cells(obj)]


def _has_condition(status: dict[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in status.get("conditions") or [])


def _job_status(obj: dict[str, Any]) -> str:
    status = obj.get("status") or {}
    if _has_condition(status, "Complete"):
        return "Complete"
    if _has_condition(status, "Failed"):
        return "Failed"
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    for kind in ("Suspended", "FailureTarget", "SuccessCriteriaMet"):
        if _has_condition(status, kind):
            return kind
    return "Running"


def _seconds_between(start: Any, end: Any) -> float | None:
    try:
        began = parse_rfc3339(str(start))
        ended = parse_rfc3339(str(end)) if end else datetime.now(UTC)
    except ValueError:
        return None
    return (ended - began).total_seconds()


def job_cells(obj: dict[str, Any], age: str, duration: Callable[[float], str]) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    succeeded = _int(status.get("succeeded"))
    if isinstance(spec.get("completions"), int):
        completions = f"{succeeded}/{spec['completions']}"
    elif _int(spec.get("parallelism")) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    took = ""
    if status.get("startTime"):
        seconds = _seconds_between(status["startTime"], status.get("completionTime"))
        took = duration(seconds) if seconds is not None else ""
    return [_job_status(obj), completions, took, age, *_template_cells(obj)]


def _address(obj: dict[str, Any], kind: str) -> str:
    for address in (obj.get("status") or {}).get("addresses") or []:
        if address.get("type") == kind:
            return str(address.get("address", ""))
    return "<none>"


def node_wide_cells(obj: dict[str, Any]) -> list[str]:
    info = (obj.get("status") or {}).get("nodeInfo") or {}
    return [
        _address(obj, "InternalIP"),
        _address(obj, "ExternalIP"),
        *(str(info.get(k) or "<unknown>") for k in ("osImage", "kernelVersion", "containerRuntimeVersion")),
    ]
