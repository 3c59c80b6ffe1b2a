"""Pure: which nodes kube-scheduler's node filters keep a pod off, before any claim is allocated: NodeUnschedulable
(a cordoned node), TaintToleration (NoSchedule and NoExecute taints must be tolerated) and NodeAffinity
(``nodeSelector`` and required node affinity, matchExpressions and matchFields), over pods and nodes in their wire
form. The embedded cluster's scheduler filters with them (:func:`taints`, :func:`node_affinity`: kube-scheduler's
reason words, for its "0/N nodes are available" message), and ``gpudra explain pod`` names what keeps a pod off
each node (:func:`kept_off`), since a claim that would fit on a node the pod cannot go to does not fit for it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Obj = Mapping[str, Any]
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NODE_SELECTOR = "node(s) didn't match Pod's node affinity/selector"
UNSCHEDULABLE = "node(s) were unschedulable"
UNTOLERATED = "node(s) had untolerated taint(s)"
NO_NODE_REASON = "NoNodeForPod"
"""What ``gpudra explain``, the web view and the controller's Events say of a claim whose pod the node filters keep
off every node with devices."""
NO_NODE_WORDS = (
    "kube-scheduler allocates a pod's claims only on a node the pod may go to, and its node filters leave none of"
    " the nodes that publish devices"
)
KEPT_OFF_SHOWN = 5
"""How many of the nodes a pod is kept off are named in a sentence (the rest are counted)."""
_CORDON: Obj = {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
"""What NodeUnschedulable asks a pod to tolerate on a cordoned node (``spec.unschedulable``)."""


def labels_of(obj: Obj) -> Mapping[str, str]:
    """The object's labels (a wire object)."""
    return (obj.get("metadata") or {}).get("labels") or {}


def _number(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def requirement_met(requirement: Obj, have: Mapping[str, str]) -> bool:
    """One label selector requirement (In, NotIn, Exists, DoesNotExist, Gt, Lt) against ``have``."""
    key, operator = str(requirement.get("key") or ""), requirement.get("operator")
    values = [str(v) for v in requirement.get("values") or ()]
    present = key in have
    if operator == "In":
        return present and have[key] in values
    if operator == "NotIn":
        return not present or have[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        value, bound = _number(have[key]), _number(values[0])
        if value is None or bound is None:
            return False
        return value > bound if operator == "Gt" else value < bound
    return False


def _term(term: Obj, node: Obj) -> bool:
    expressions, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not expressions and not fields:
        return False  # an empty term matches no node
    have = labels_of(node)
    name = {"metadata.name": str((node.get("metadata") or {}).get("name") or "")}
    return all(requirement_met(r, have) for r in expressions) and all(
        requirement_met(r, name) for r in fields
    )


def _selector_miss(pod: Obj, node: Obj) -> str | None:
    """The first ``nodeSelector`` label the node lacks, as ``key=value``; "required node affinity" when no
    required term matches; None when the pod may go there."""
    spec = pod.get("spec") or {}
    have = labels_of(node)
    for key, value in (spec.get("nodeSelector") or {}).items():
        if have.get(key) != value:
            return f"nodeSelector {key}={value}"
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {})  # fmt: skip
    terms = required.get("nodeSelectorTerms")
    if terms is not None and not any(_term(t, node) for t in terms):
        return "required node affinity"
    return None


def node_affinity(pod: Obj, node: Obj) -> str | None:
    """NodeAffinity: every nodeSelector label, and one of the required node affinity terms."""
    return NODE_SELECTOR if _selector_miss(pod, node) is not None else None


def _tolerated(taint: Obj, tolerations: Sequence[Obj]) -> bool:
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key") or ""
        if toleration.get("operator") == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _untolerated(pod: Obj, node: Obj) -> Obj | None:
    """The first taint of the node the pod does not tolerate (a cordon as the unschedulable taint)."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    spec = node.get("spec") or {}
    if spec.get("unschedulable") and not _tolerated(_CORDON, tolerations):
        return _CORDON
    first: Obj | None = next(
        (
            t
            for t in spec.get("taints") or ()
            if t.get("effect") in ("NoSchedule", "NoExecute") and not _tolerated(t, tolerations)
        ),
        None,
    )  # the embedded scheduler asks this per node and pod: stop at the first
    return first


def taints(pod: Obj, node: Obj) -> str | None:
    """NodeUnschedulable and TaintToleration: a cordoned node and NoSchedule / NoExecute taints must be
    tolerated (PreferNoSchedule is a preference)."""
    taint = _untolerated(pod, node)
    if taint is None:
        return None
    return UNSCHEDULABLE if taint is _CORDON else UNTOLERATED


def kept_off(pod: Obj, nodes: Iterable[Obj]) -> dict[str, str]:
    """Node name -> what keeps the pod off it, in kube-scheduler's plugin order (cordon and taints, then node
    affinity), naming the taint or the selector; nodes the pod may go to are left out."""
    out: dict[str, str] = {}
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name") or "")
        taint = _untolerated(pod, node)
        if taint is _CORDON:
            out[name] = "cordoned (spec.unschedulable)"
        elif taint is not None:
            value = f"={taint['value']}" if taint.get("value") else ""
            out[name] = f"taint {taint.get('key')}{value}:{taint.get('effect')} not tolerated"
        elif (miss := _selector_miss(pod, node)) is not None:
            out[name] = f"does not match the pod's {miss}"
    return out


def filters_of(pod: Obj) -> Obj:
    """The part of a pod (a wire object) that :func:`kept_off` reads: pods alike there are kept off the same
    nodes (a Job's pods, say)."""
    spec = pod.get("spec") or {}
    affinity = (spec.get("affinity") or {}).get("nodeAffinity")
    kept = {
        "nodeSelector": spec.get("nodeSelector"),
        "affinity": {"nodeAffinity": affinity} if affinity else None,
        "tolerations": spec.get("tolerations"),
    }
    return {"spec": {key: value for key, value in kept.items() if value}}


def filters_key(filters: Obj) -> str:
    """A key of :func:`filters_of`'s answer: pods whose keys are equal are kept off the same nodes."""
    return json.dumps(filters, sort_keys=True)


def kept_off_title(kept: int, nodes: int) -> str:
    """How many of the ``nodes`` that publish devices the node filters keep the pod off (``kept`` of them)."""
    if kept < nodes:
        return f"kube-scheduler's node filters keep the pod off {kept} of {nodes} nodes with devices"
    off = f"all {nodes} nodes" if nodes > 1 else "the only node"
    return f"kube-scheduler's node filters keep the pod off {off} with devices"


def kept_off_sentence(kept: Mapping[str, str], nodes: int) -> str:
    """:func:`kept_off_title` with the first ``KEPT_OFF_SHOWN`` nodes named, each with what keeps the pod off it:
    one sentence, for an Event."""
    named = sorted(kept.items())
    parts = [f"{node}: {why}" for node, why in named[:KEPT_OFF_SHOWN]]
    if len(named) > KEPT_OFF_SHOWN:
        parts.append(f"and {len(named) - KEPT_OFF_SHOWN} more")
    return f"{kept_off_title(len(kept), nodes)}: {'; '.join(parts)}"
