"""Pure: what kube-controller-manager's deployment and replicaset controllers decide, for the stand-ins.

A Deployment owns one ReplicaSet per pod template (named ``<deployment>-<pod-template-hash>``, the hash also a
label of the ReplicaSet, its selector and its pods); the ReplicaSet of the current template gets the
Deployment's replicas, the older ones none. Statuses are counted as the real controllers count them: a pod is
ready when its Ready condition is True, available when ready (minReadySeconds is not modelled), active until it
finished or is being deleted.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
_SAFE = "bcdfghjklmnpqrstvwxz2456789"
"""The alphabet Kubernetes writes hashes and generated name suffixes in (no vowels, no look-alikes)."""


def condition_true(obj: dict[str, Any], kind: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def is_active(pod: dict[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp")


def is_ready(pod: dict[str, Any]) -> bool:
    return is_active(pod) and condition_true(pod, "Ready")


def controller_uid(obj: dict[str, Any]) -> str:
    """The uid of the object's controller (its ownerReference with ``controller: true``), or ''."""
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid", ""))
    return ""


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def template_hash(template: dict[str, Any]) -> str:
    """The pod-template-hash of a template: a digest written in Kubernetes' safe alphabet, 10 characters."""
    digest = int.from_bytes(hashlib.sha256(json.dumps(template, sort_keys=True).encode()).digest()[:8])
    text = ""
    for _ in range(10):
        digest, index = divmod(digest, len(_SAFE))
        text += _SAFE[index]
    return text


def desired(workload: dict[str, Any]) -> int:
    replicas = (workload.get("spec") or {}).get("replicas")
    return replicas if isinstance(replicas, int) else 1


def replicaset_for(deployment: dict[str, Any], pod_hash: str, revision: int) -> dict[str, Any]:
    """The ReplicaSet of the Deployment's current template."""
    meta, spec = deployment["metadata"], deployment.get("spec") or {}
    template = json.loads(json.dumps(spec.get("template") or {}))
    template_meta = template.setdefault("metadata", {})
    labels = {**(template_meta.get("labels") or {}), HASH_LABEL: pod_hash}
    template_meta["labels"] = labels
    selector = json.loads(json.dumps(spec.get("selector") or {}))
    selector["matchLabels"] = {**(selector.get("matchLabels") or {}), HASH_LABEL: pod_hash}
    replicas = desired(deployment)
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{meta['name']}-{pod_hash}",
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": {
                REVISION: str(revision),
                "deployment.kubernetes.io/desired-replicas": str(replicas),
                "deployment.kubernetes.io/max-replicas": str(replicas + max_surge(deployment)),
            },
            "ownerReferences": [owner_reference(deployment)],
        },
        "spec": {"replicas": replicas, "selector": selector, "template": template},
    }


def _bound(value: Any, replicas: int, default: str, *, round_up: bool) -> int:
    value = default if value is None else value
    if isinstance(value, int):
        return value
    text = str(value)
    if text.endswith("%"):
        share = replicas * float(text[:-1]) / 100
        return math.ceil(share) if round_up else math.floor(share)
    return int(text) if text.isdigit() else 0


def _rolling(deployment: dict[str, Any]) -> dict[str, Any]:
    strategy = (deployment.get("spec") or {}).get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return {"maxSurge": 0, "maxUnavailable": desired(deployment)}
    return strategy.get("rollingUpdate") or {}


def max_surge(deployment: dict[str, Any]) -> int:
    return _bound(_rolling(deployment).get("maxSurge"), desired(deployment), "25%", round_up=True)


def max_unavailable(deployment: dict[str, Any]) -> int:
    replicas = desired(deployment)
    found = _bound(_rolling(deployment).get("maxUnavailable"), replicas, "25%", round_up=False)
    if found == 0 and max_surge(deployment) == 0:
        return 1
    return min(found, replicas)


def unmodelled(deployment: dict[str, Any]) -> list[str]:
    """The Deployment's fields the stand-in does not act on."""
    spec = deployment.get("spec") or {}
    found = ["spec.paused"] if spec.get("paused") else []
    return found + (["spec.minReadySeconds"] if spec.get("minReadySeconds") else [])


def revision_of(replicaset: dict[str, Any]) -> int:
    text = str((replicaset["metadata"].get("annotations") or {}).get(REVISION, "0"))
    return int(text) if text.isdigit() else 0


def replicaset_status(replicaset: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any]:
    """The status the replicaset controller writes, from the ReplicaSet's own pods."""
    active = [p for p in pods if is_active(p)]
    ready = sum(1 for p in active if is_ready(p))
    status = {
        "replicas": len(active),
        "fullyLabeledReplicas": len(active),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "observedGeneration": replicaset["metadata"].get("generation", 1),
    }
    return {k: v for k, v in status.items() if v != 0 or k == "replicas"}


def _condition(
    old: list[dict[str, Any]], kind: str, status: str, reason: str, message: str, now: str
) -> dict[str, Any]:
    """A Deployment condition; kept as it was (times included) while its status, reason and message hold."""
    for condition in old:
        if condition.get("type") == kind:
            if (condition.get("status"), condition.get("reason"), condition.get("message")) == (
                status,
                reason,
                message,
            ):
                return condition
            if condition.get("status") == status:
                return {**condition, "reason": reason, "message": message, "lastUpdateTime": now}
    return {
        "type": kind,
        "status": status,
        "lastUpdateTime": now,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    }


def deployment_status(
    deployment: dict[str, Any], new: dict[str, Any], replicasets: list[dict[str, Any]], now: str
) -> dict[str, Any]:
    """The status the deployment controller writes: counts over its ReplicaSets, the Available and Progressing
    conditions; ``new`` is the ReplicaSet of the current template."""
    old = (deployment.get("status") or {}).get("conditions") or []
    counts = [rs.get("status") or {} for rs in replicasets]
    replicas = sum(int(c.get("replicas") or 0) for c in counts)
    available = sum(int(c.get("availableReplicas") or 0) for c in counts)
    updated = int((new.get("status") or {}).get("replicas") or 0)
    wanted = desired(deployment)
    spec_total = sum(int((rs.get("spec") or {}).get("replicas") or 0) for rs in replicasets)
    if available >= wanted - max_unavailable(deployment):
        available_condition = _condition(
            old, "Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability.", now
        )
    else:
        available_condition = _condition(
            old,
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
            now,
        )
    name = new["metadata"]["name"]
    new_available = int((new.get("status") or {}).get("availableReplicas") or 0)
    if updated == wanted and replicas == wanted and new_available == wanted:
        reason, message = "NewReplicaSetAvailable", f'ReplicaSet "{name}" has successfully progressed.'
    else:
        reason, message = "ReplicaSetUpdated", f'ReplicaSet "{name}" is progressing.'
    status: dict[str, Any] = {
        "observedGeneration": deployment["metadata"].get("generation", 1),
        "replicas": replicas,
        "updatedReplicas": updated,
        "readyReplicas": sum(int(c.get("readyReplicas") or 0) for c in counts),
        "availableReplicas": available,
    }
    if spec_total - available > 0:
        status["unavailableReplicas"] = spec_total - available
    status["conditions"] = [
        available_condition,
        _condition(old, "Progressing", "True", reason, message, now),
    ]
    return {k: v for k, v in status.items() if v != 0 or k == "observedGeneration"}
