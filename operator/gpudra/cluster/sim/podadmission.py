"""What a copied pod needs to pass the copy's API server admission, as the source cluster admitted it: the
ServiceAccounts and PriorityClasses it names (created in the copy with the name, and for a class the value and
preemption policy the pod carried), and the pod without what admission sets again (``priority`` and the
ServiceAccount's token volume and its mounts). Pure."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpudra.cluster.apiserver.podadmission import SYSTEM_PRIORITY_CLASSES, TOKEN_VOLUME_PREFIX


def service_accounts(pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ServiceAccounts the pods name, other than each namespace's ``default`` (which the API server makes)."""
    wanted = sorted(
        {
            (str(p["metadata"].get("namespace") or "default"), str(p["spec"]["serviceAccountName"]))
            for p in pods
            if p["spec"].get("serviceAccountName") not in (None, "", "default")
        }
    )
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}
        for namespace, name in wanted
    ]


def priority_classes(pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The PriorityClasses the pods name (not the built-in system ones), with the value admission gave them."""
    found: dict[str, dict[str, Any]] = {}
    for pod in pods:
        spec = pod["spec"]
        name = spec.get("priorityClassName")
        if not name or name in SYSTEM_PRIORITY_CLASSES or name in found:
            continue
        found[name] = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": int(spec.get("priority") or 0),
            "preemptionPolicy": spec.get("preemptionPolicy") or "PreemptLowerPriority",
        }
    return [found[name] for name in sorted(found)]


def admissible(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod without what the copy's admission sets again: its priority, its token volume and mounts."""
    spec = {k: v for k, v in pod["spec"].items() if k != "priority"}
    tokens = {
        v.get("name")
        for v in spec.get("volumes") or ()
        if str(v.get("name", "")).startswith(TOKEN_VOLUME_PREFIX) and "projected" in v
    }
    if tokens:
        spec["volumes"] = [v for v in spec["volumes"] if v.get("name") not in tokens]
        for kind in ("initContainers", "containers"):
            if spec.get(kind):
                spec[kind] = [
                    {
                        **c,
                        "volumeMounts": [
                            m for m in c.get("volumeMounts") or () if m.get("name") not in tokens
                        ],
                    }
                    for c in spec[kind]
                ]
    return {**pod, "spec": spec}
