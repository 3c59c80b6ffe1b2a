"""kube-scheduler's filters for what GPU workloads use, as pure functions over pods and nodes (wire dicts).

NodeUnschedulable, NodeAffinity (``nodeSelector`` and required node affinity, matchExpressions and matchFields) and
TaintToleration (NoSchedule and NoExecute taints must be tolerated) are in ``gpudra.planning.podnodes``, which
``gpudra explain`` shares; here NodeResourcesFit (cpu, memory, pods and any other allocatable resource against the
requests of the pods on the node; a container's limits stand in for absent requests, init containers count by
their largest) and InterPodAffinity (required pod affinity and anti-affinity with any ``topologyKey``, and the
anti-affinity of the pods already placed). Each filter answers None when the node passes, else kube-scheduler's
reason, and :func:`unschedulable_message` words a failure as kube-scheduler does (``0/4 nodes are available: 3
node(s) didn't match pod anti-affinity rules, ...``). What the stand-in does not implement is named by
:func:`unsupported` so that the pod can be told.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpudra.api.quantity import parse_quantity
from gpudra.cluster.apiserver.podadmission import SYSTEM_PRIORITY_CLASSES
from gpudra.errors import InvalidInputError
from gpudra.planning.podnodes import labels_of, requirement_met

Obj = Mapping[str, Any]
AFFINITY = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
_SCALED = {"cpu": 1000}  # cpu counts in millicores, as kube-scheduler does


def quantity(value: Any, resource: str) -> int:
    """A request in the scheduler's integer units (cpu in millicores, rounded up); 0 for a malformed one."""
    return _quantity(value if isinstance(value, str | int) else str(value), _SCALED.get(resource, 1))


@functools.lru_cache(maxsize=4096)
def _quantity(value: str | int, scale: int) -> int:
    try:
        return math.ceil(parse_quantity(value) * scale)
    except InvalidInputError:
        return 0


# ---- requests ------------------------------------------------------------------------------------------------
def _container_requests(container: Obj) -> dict[str, int]:
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {name: quantity(value, name) for name, value in merged.items()}


def pod_requests(pod: Obj, *, ignore: Iterable[str] = ()) -> dict[str, int]:
    """What the pod asks of a node: containers summed, init containers by their largest, overhead added; ``pods``
    is 1. Resources in ``ignore`` (extended resources that DRA serves) are left out."""
    spec = pod.get("spec") or {}
    total: Counter[str] = Counter()
    for container in spec.get("containers") or ():
        total.update(_container_requests(container))
    for container in spec.get("initContainers") or ():
        for name, amount in _container_requests(container).items():
            total[name] = max(total[name], amount)
    for name, value in (spec.get("overhead") or {}).items():
        total[name] += quantity(value, name)
    skipped = set(ignore)
    requests = {name: amount for name, amount in total.items() if amount and name not in skipped}
    requests["pods"] = 1
    return requests


def allocatable(node: Obj) -> dict[str, int]:
    status = node.get("status") or {}
    found = status.get("allocatable") or status.get("capacity") or {}
    return {name: quantity(value, name) for name, value in found.items()}


def resources(requests: Mapping[str, int], free: Mapping[str, int]) -> list[str]:
    """NodeResourcesFit: every resource the pod asks for that the node has too little of left."""
    reasons = []
    for name, amount in sorted(requests.items()):
        if amount > free.get(name, 0):
            reasons.append("Too many pods" if name == "pods" else f"Insufficient {name}")
    return reasons


# ---- inter-pod affinity --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Placed:
    """A pod on a node, as inter-pod affinity sees it."""

    namespace: str
    labels: Mapping[str, str]
    node: str
    anti_affinity: tuple[Obj, ...] = ()


def placed(pod: Obj, node: str) -> Placed:
    meta = pod.get("metadata") or {}
    terms = required_terms(pod, "podAntiAffinity")
    return Placed(str(meta.get("namespace") or ""), dict(meta.get("labels") or {}), node, tuple(terms))


def required_terms(pod: Obj, kind: str) -> list[Obj]:
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get(kind) or {}
    return list(affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or [])


def _selector(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector; a missing one matches nothing (kube-scheduler's rule for affinity terms)."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(requirement_met(r, labels) for r in selector.get("matchExpressions") or ())


def _with_label_keys(term: Obj, pod: Obj) -> Obj | None:
    """The term's selector with matchLabelKeys / mismatchLabelKeys resolved against the incoming pod."""
    selector = dict(term.get("labelSelector") or {}) if term.get("labelSelector") is not None else None
    labels = labels_of(pod)
    extra = [
        {"key": k, "operator": "In", "values": [labels[k]]}
        for k in term.get("matchLabelKeys") or ()
        if k in labels
    ]
    extra += [
        {"key": k, "operator": "NotIn", "values": [labels[k]]}
        for k in term.get("mismatchLabelKeys") or ()
        if k in labels
    ]
    if extra and selector is not None:
        selector["matchExpressions"] = [*(selector.get("matchExpressions") or []), *extra]
    return selector


def _namespaces(term: Obj, owner_namespace: str) -> set[str] | None:
    """The namespaces a term selects; None: all (an empty namespaceSelector)."""
    selector = term.get("namespaceSelector")
    if selector is not None and not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return None
    return set(term.get("namespaces") or ()) or {owner_namespace}


def _matches(term: Obj, owner: Obj, namespace: str, labels: Mapping[str, str]) -> bool:
    """Whether a pod in ``namespace`` with ``labels`` is one that ``owner``'s term selects."""
    namespaces = _namespaces(term, str((owner.get("metadata") or {}).get("namespace") or ""))
    if namespaces is not None and namespace not in namespaces:
        return False
    return _selector(_with_label_keys(term, owner), labels)


@dataclass
class AffinityView:
    """The placed pods and the node labels inter-pod affinity needs, for one incoming pod."""

    pods: Sequence[Placed]
    node_labels: Mapping[str, Mapping[str, str]]
    _domains: dict[int, set[str]] = field(default_factory=dict)
    _guards: list[Placed] | None = None

    @property
    def guards(self) -> list[Placed]:
        """The placed pods with required anti-affinity (usually few of many)."""
        if self._guards is None:
            self._guards = [other for other in self.pods if other.anti_affinity]
        return self._guards

    def domains(self, term: Obj, pod: Obj) -> set[str]:
        """The values of the term's topologyKey on the nodes of the pods the term matches."""
        found = self._domains.get(id(term))
        if found is None:
            key = str(term.get("topologyKey") or "")
            found = set()
            for other in self.pods:
                value = self.node_labels.get(other.node, {}).get(key)
                if value is not None and _matches(term, pod, other.namespace, other.labels):
                    found.add(value)
            self._domains[id(term)] = found
        return found


def inter_pod_affinity(pod: Obj, node: Obj, view: AffinityView) -> str | None:
    """InterPodAffinity: the anti-affinity of placed pods, then the pod's required anti-affinity and affinity."""
    labels = labels_of(node)
    meta = pod.get("metadata") or {}
    namespace, pod_labels = str(meta.get("namespace") or ""), labels_of(pod)
    for other in view.guards:
        owner = {"metadata": {"namespace": other.namespace, "labels": other.labels}}
        for term in other.anti_affinity:
            key = str(term.get("topologyKey") or "")
            theirs = view.node_labels.get(other.node, {}).get(key)
            if (
                theirs is not None
                and labels.get(key) == theirs
                and _matches(term, owner, namespace, pod_labels)
            ):
                return EXISTING_ANTI_AFFINITY
    for term in required_terms(pod, "podAntiAffinity"):
        value = labels.get(str(term.get("topologyKey") or ""))
        if value is not None and value in view.domains(term, pod):
            return ANTI_AFFINITY
    affinity = required_terms(pod, "podAffinity")
    together = all(labels.get(str(t.get("topologyKey") or "")) in view.domains(t, pod) for t in affinity)
    if together:
        return None
    # the first pod of a group: allowed when no pod matches any term anywhere and the pod matches its own terms
    first = all(not view.domains(t, pod) for t in affinity) and all(
        _matches(t, pod, namespace, pod_labels) for t in affinity
    )
    return None if first else AFFINITY


# ---- priority, messages and what is not implemented ------------------------------------------------------


def pod_priority(pod: dict[str, Any]) -> int:
    """spec.priority as admission sets it, else the built-in system classes' values (no PriorityClass lookup)."""
    spec = pod.get("spec") or {}
    if isinstance(spec.get("priority"), int):
        return int(spec["priority"])
    return SYSTEM_PRIORITY_CLASSES.get(str(spec.get("priorityClassName", "")), 0)


def unschedulable_message(total: int, reasons: Counter[str]) -> str:
    """kube-scheduler's FailedScheduling text: each reason with its node count, sorted."""
    parts = sorted(f"{count} {reason}" for reason, count in reasons.items())
    return f"0/{total} nodes are available: {', '.join(parts)}."


_UNSUPPORTED = (
    ("spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution", "preferred node affinity"),
    ("spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution", "preferred pod affinity"),
    (
        "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution",
        "preferred pod anti-affinity",
    ),
    ("spec.topologySpreadConstraints", "topology spread constraints"),
)
"""Not preemptionPolicy: the API server's Priority admission sets it on every pod (PreemptLowerPriority); the
stand-in never preempts, which a pod of a class other than the system ones is told (``unsupported``)."""


def _at(obj: Obj, path: str) -> Any:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def unsupported(pod: Obj, *, known_priority_classes: Iterable[str] = ()) -> list[tuple[str, str]]:
    """(field, feature) of what the pod sets that the stand-in scheduler does not implement."""
    found = [(path, feature) for path, feature in _UNSUPPORTED if _at(pod, path)]
    priority_class = (pod.get("spec") or {}).get("priorityClassName")
    if priority_class and priority_class not in set(known_priority_classes):
        found.append(("spec.priorityClassName", "priority classes and preemption"))
    return found
