"""A pod's defaults as kube-apiserver sets them when it decodes one (k8s.io/kubernetes pkg/apis/core/v1
defaults.go, 1.37), and the QoS class it records in status on create (GetPodQOS). Pure: mutates the decoded
object. What a user sees on ``kubectl get pod -o yaml``: restartPolicy, dnsPolicy, schedulerName,
terminationGracePeriodSeconds, enableServiceLinks, securityContext, the deprecated serviceAccount; per container
imagePullPolicy, terminationMessagePath and -Policy, requests defaulted from limits, port protocols, probe timings;
volume modes.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from gpudra.api.quantity import parse_quantity
from gpudra.errors import InvalidInputError

_SPEC = {
    "restartPolicy": "Always",
    "terminationGracePeriodSeconds": 30,
    "dnsPolicy": "ClusterFirst",
    "securityContext": {},
    "schedulerName": "default-scheduler",
    "enableServiceLinks": True,
}
_CONTAINER = {"terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}
_PROBE = {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}
_MODE = 420  # 0644
_QOS_RESOURCES = ("cpu", "memory")


def _pull_policy(image: str) -> str:
    """Always for ``:latest`` or no tag, IfNotPresent for any other tag or a digest."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.rsplit(":", 1)[1] if ":" in last else ""
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _container(container: dict[str, Any]) -> None:
    if container.get("image"):
        container.setdefault("imagePullPolicy", _pull_policy(str(container["image"])))
    for key, value in _CONTAINER.items():
        container.setdefault(key, value)
    resources = container.setdefault("resources", {})
    if isinstance(resources, dict) and isinstance(resources.get("limits"), dict) and resources["limits"]:
        requests = resources.setdefault("requests", {})
        for name, quantity in resources["limits"].items():
            requests.setdefault(name, quantity)
    for port in container.get("ports") or ():
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if isinstance(container.get(probe), dict):
            for field, seconds in _PROBE.items():
                container[probe].setdefault(field, seconds)
    for env in container.get("env") or ():
        field_ref = ((env or {}).get("valueFrom") or {}).get("fieldRef")
        if isinstance(field_ref, dict):
            field_ref.setdefault("apiVersion", "v1")


def _volume(volume: dict[str, Any]) -> None:
    for kind in ("configMap", "secret", "projected", "downwardAPI"):
        if isinstance(volume.get(kind), dict):
            volume[kind].setdefault("defaultMode", _MODE)
    if isinstance(volume.get("hostPath"), dict):
        volume["hostPath"].setdefault("type", "")


def default_pod(pod: dict[str, Any]) -> None:
    """Fill in the defaults of a decoded pod (a body that is not a pod spec is left alone: validation says why)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    for key, value in _SPEC.items():
        spec.setdefault(key, dict(value) if isinstance(value, dict) else value)
    if spec.get("serviceAccountName") and not spec.get("serviceAccount"):
        spec["serviceAccount"] = spec["serviceAccountName"]
    for kind in ("initContainers", "containers"):
        for container in spec.get(kind) or ():
            if isinstance(container, dict):
                _container(container)
    for volume in spec.get("volumes") or ():
        if isinstance(volume, dict):
            _volume(volume)


def _amount(value: Any) -> Fraction:
    try:
        return parse_quantity(value)
    except (InvalidInputError, TypeError):
        return Fraction(0)


def qos_class(spec: dict[str, Any]) -> str:
    """Guaranteed when every container limits cpu and memory and requests what it limits; BestEffort when none
    requests or limits either; Burstable else (init containers count)."""
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    guaranteed = True
    for container in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]:
        resources = (container or {}).get("resources") or {}
        for name, value in (resources.get("requests") or {}).items():
            if name in _QOS_RESOURCES and _amount(value) != 0:
                requests[name] = requests.get(name, Fraction(0)) + _amount(value)
        found = set()
        for name, value in (resources.get("limits") or {}).items():
            if name in _QOS_RESOURCES and _amount(value) != 0:
                found.add(name)
                limits[name] = limits.get(name, Fraction(0)) + _amount(value)
        guaranteed = guaranteed and found == set(_QOS_RESOURCES)
    if not requests and not limits:
        return "BestEffort"
    return "Guaranteed" if guaranteed and requests == limits else "Burstable"


def gated_condition(pod: dict[str, Any], now: str) -> None:
    """kube-apiserver's condition on a pod created with scheduling gates: ``PodScheduled`` False, reason
    ``SchedulingGated`` (``kubectl get pods`` shows that as the pod's status), unless it has that condition."""
    if not (pod.get("spec") or {}).get("schedulingGates"):
        return
    conditions = pod.setdefault("status", {}).setdefault("conditions", [])
    if any(c.get("type") == "PodScheduled" for c in conditions):
        return
    conditions.append(
        {
            "type": "PodScheduled",
            "status": "False",
            "lastProbeTime": None,
            "lastTransitionTime": now,
            "reason": "SchedulingGated",
            "message": "Scheduling is blocked due to non-empty scheduling gates",
        }
    )
