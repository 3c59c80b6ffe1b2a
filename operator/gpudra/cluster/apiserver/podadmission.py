"""The mutating admission kube-apiserver runs on every pod it creates, for what a user sees on the pod:

- ServiceAccount: ``serviceAccountName`` defaults to ``default``, which must exist (403 else), and unless the pod
  or its ServiceAccount opts out (``automountServiceAccountToken: false``), a ``kube-api-access-<random>``
  projected volume (a bound token, the cluster CA, the namespace) mounted read-only in every container;
- Priority: ``priority`` and ``preemptionPolicy`` from the pod's PriorityClass (the global default's, or 0 with
  none); a class that does not exist, or a priority the pod sets itself, is refused (403);
- DefaultTolerationSeconds: NoExecute tolerations of 300 s for ``node.kubernetes.io/not-ready`` and
  ``unreachable``, unless the pod already tolerates them.

Pure but for the two lookups it is given (the database's stores).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from .status import APIStatusError

Lookup = Callable[[str, str], dict[str, Any] | None]
"""(namespace, name) -> the stored ServiceAccount or None."""

TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_VOLUME_PREFIX = "kube-api-access-"
SYSTEM_PRIORITY_CLASSES = {"system-node-critical": 2_000_001_000, "system-cluster-critical": 2_000_000_000}
"""The PriorityClasses every cluster has from the start, with their values."""
_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"
_TOLERATED_SECONDS = 300
_NODE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def _forbidden(pod: dict[str, Any], why: str) -> APIStatusError:
    name = str((pod.get("metadata") or {}).get("name") or "")
    return APIStatusError(403, "Forbidden", f'pods "{name}" is forbidden: {why}', name=name, kind="pods")


def _token_volume() -> dict[str, Any]:
    name = TOKEN_VOLUME_PREFIX + "".join(random.choices(_SUFFIX, k=5))
    return {
        "name": name,
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "namespace",
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                            }
                        ]
                    }
                },
            ],
        },
    }


def _service_account(pod: dict[str, Any], spec: dict[str, Any], namespace: str, accounts: Lookup) -> None:
    name = str(spec.get("serviceAccountName") or "default")
    spec["serviceAccountName"] = spec["serviceAccount"] = name
    account = accounts(namespace, name)
    if account is None:
        raise _forbidden(
            pod, f'error looking up service account {namespace}/{name}: serviceaccount "{name}" not found'
        )
    automount = spec.get("automountServiceAccountToken")
    if automount is None:
        automount = account.get("automountServiceAccountToken")
    if automount is False:
        return
    containers = [
        c for kind in ("initContainers", "containers") for c in spec.get(kind) or () if isinstance(c, dict)
    ]
    needing = [
        c
        for c in containers
        if not any(m.get("mountPath") == TOKEN_PATH for m in c.get("volumeMounts") or ())
    ]
    if not needing:
        return
    volume = _token_volume()
    spec["volumes"] = [*(spec.get("volumes") or ()), volume]
    for container in needing:
        mount = {"name": volume["name"], "readOnly": True, "mountPath": TOKEN_PATH}
        container["volumeMounts"] = [*(container.get("volumeMounts") or ()), mount]


def _priority(pod: dict[str, Any], spec: dict[str, Any], classes: Mapping[str, dict[str, Any]]) -> None:
    name = str(spec.get("priorityClassName") or "")
    if name:
        found = classes.get(name)
        if found is None:
            raise _forbidden(pod, f"no PriorityClass with name {name} was found")
    else:
        found = next((c for c in classes.values() if c.get("globalDefault") is True), None)
        if found is not None:
            spec["priorityClassName"] = found["metadata"]["name"]
    value = int((found or {}).get("value") or 0)
    policy = str((found or {}).get("preemptionPolicy") or "PreemptLowerPriority")
    if spec.get("priority") is not None and spec["priority"] != value:
        raise _forbidden(
            pod,
            f"the integer value of priority ({spec['priority']}) must not be provided in pod spec; priority "
            f"admission controller computed {value} from the given PriorityClass name",
        )
    if spec.get("preemptionPolicy") is not None and spec["preemptionPolicy"] != policy:
        raise _forbidden(
            pod,
            f"the string value of PreemptionPolicy ({spec['preemptionPolicy']}) must not be provided in pod spec; "
            f"priority admission controller computed {policy} from the given PriorityClass name",
        )
    spec["priority"], spec["preemptionPolicy"] = value, policy


def _tolerates(toleration: Any, key: str) -> bool:
    """Whether a toleration tolerates the NoExecute taint ``key`` (with no value)."""
    if not isinstance(toleration, dict) or toleration.get("effect") not in (None, "", "NoExecute"):
        return False
    if not toleration.get("key"):
        return toleration.get("operator") == "Exists"
    if toleration["key"] != key:
        return False
    return toleration.get("operator") == "Exists" or not toleration.get("value")


def _toleration_seconds(spec: dict[str, Any]) -> None:
    tolerations = list(spec.get("tolerations") or ())
    for key in _NODE_TAINTS:
        if not any(_tolerates(t, key) for t in tolerations):
            tolerations.append(
                {
                    "key": key,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": _TOLERATED_SECONDS,
                }
            )
    spec["tolerations"] = tolerations


def admit_pod(
    pod: dict[str, Any], namespace: str, accounts: Lookup, classes: Mapping[str, dict[str, Any]]
) -> None:
    """Run the three plugins on a pod being created (mutates it; raises a 403 APIStatusError when refused).
    ``classes``: every PriorityClass by name."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    _service_account(pod, spec, namespace, accounts)
    _priority(pod, spec, classes)
    _toleration_seconds(spec)
