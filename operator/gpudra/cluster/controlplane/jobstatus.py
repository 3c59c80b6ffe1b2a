"""Pure: what kube-controller-manager's job controller decides for a NonIndexed Job, for the stand-in.

Pods are counted as the real controller counts them (active, ready, succeeded, failed); it keeps
``min(parallelism, completions - succeeded)`` pods active, and the Job completes once ``completions`` pods
succeeded (SuccessCriteriaMet, then Complete), or fails once more pods failed than ``backoffLimit`` allows.
Indexed completion, suspension, pod failure policies and active deadlines are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .rollout import is_active, is_ready

COMPLETED_MESSAGE = "Reached expected number of succeeded pods"
BACKOFF_MESSAGE = "Job has reached the specified backoff limit"


@dataclass(frozen=True, slots=True)
class JobPlan:
    create: int  # pods to create now
    status: dict[str, Any]  # the Job's status to write


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _condition(kind: str, reason: str, message: str, now: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True",
        "lastProbeTime": now,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    }


def job_plan(job: dict[str, Any], pods: list[dict[str, Any]], now: str) -> JobPlan:
    """The pods to add and the status of ``job``, from its own pods; ``now`` is the RFC 3339 time."""
    spec, old = job.get("spec") or {}, job.get("status") or {}
    parallelism = _int(spec.get("parallelism"), 1)
    completions = _int(spec.get("completions"), parallelism if spec.get("parallelism") is None else -1)
    active = [p for p in pods if is_active(p)]
    succeeded = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")
    failed = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Failed")
    conditions = list(old.get("conditions") or [])
    finished = any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conditions)
    status: dict[str, Any] = {"startTime": old.get("startTime") or now}
    create = 0
    if not finished:
        if (completions >= 0 and succeeded >= completions) or (completions < 0 and succeeded and not active):
            conditions += [
                _condition("SuccessCriteriaMet", "CompletionsReached", COMPLETED_MESSAGE, now),
                _condition("Complete", "CompletionsReached", COMPLETED_MESSAGE, now),
            ]
            status["completionTime"] = now
        elif failed > _int(spec.get("backoffLimit"), 6):
            conditions += [
                _condition("FailureTarget", "BackoffLimitExceeded", BACKOFF_MESSAGE, now),
                _condition("Failed", "BackoffLimitExceeded", BACKOFF_MESSAGE, now),
            ]
        else:
            remaining = completions - succeeded if completions >= 0 else parallelism
            create = max(0, min(parallelism, remaining) - len(active))
    elif old.get("completionTime"):
        status["completionTime"] = old["completionTime"]
    if conditions:
        status["conditions"] = conditions
    counts = {
        "active": len(active) + create,
        "ready": sum(1 for p in active if is_ready(p)),
        "succeeded": succeeded,
        "failed": failed,
    }
    status.update({k: v for k, v in counts.items() if v or k == "ready"})
    status["uncountedTerminatedPods"] = {}
    return JobPlan(create, status)


def unmodelled(job: dict[str, Any]) -> list[str]:
    """The Job's fields the stand-in does not act on (it runs the Job as a NonIndexed one without them)."""
    spec = job.get("spec") or {}
    found = [f"spec.{k}" for k in ("podFailurePolicy", "activeDeadlineSeconds", "successPolicy") if k in spec]
    if spec.get("completionMode") == "Indexed":
        found.append("spec.completionMode=Indexed")
    if spec.get("suspend"):
        found.append("spec.suspend")
    return found


def job_pod_labels(job: dict[str, Any]) -> dict[str, str]:
    """The labels the job controller gives each pod, over the template's."""
    meta = job["metadata"]
    template = ((job.get("spec") or {}).get("template") or {}).get("metadata") or {}
    return {
        **(template.get("labels") or {}),
        "batch.kubernetes.io/controller-uid": meta["uid"],
        "batch.kubernetes.io/job-name": meta["name"],
        "controller-uid": meta["uid"],
        "job-name": meta["name"],
    }
