"""Sentences that need no ranking: a claim's own problems (a DeviceClass that does not exist, adminAccess the
namespace does not allow, a selector that does not compile), and the values the closest devices have for what a
failing selector reads."""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Collection, Sequence

from gpudra.allocator.diagnosis import DeviceMiss, Failure
from gpudra.allocator.requests import ADMIN_ACCESS_LABEL
from gpudra.allocator.vocabulary import listed

CLAIM_LEVEL = ("ClassNotFound", "AdminAccessDenied")
ABORTED = (
    "kube-scheduler aborts the pod's scheduling attempt at this error: no other node is chosen meanwhile"
)
"""Said of a node where Kubernetes' allocator errs (``Failure.aborts``) rather than finding the node unsuitable."""
_COMPILE = re.compile(r"^(request|DeviceClass) (\S+): selector #(\d+): (.*)$", re.DOTALL)
_MISSING_CLASS = re.compile(r"^request (\S+): DeviceClass (\S+) not found")


def claim_level(failure: Failure) -> bool:
    """A problem of the claim itself, which no node changes."""
    if failure.reason in CLAIM_LEVEL:
        return True
    return failure.reason == "InvalidSelector" and not any(d.error_device for d in failure.requests)


def meant_class(name: str, classes: Collection[str]) -> str | None:
    """The DeviceClass a name that is not one most likely meant (a typo), if any is close enough."""
    close = difflib.get_close_matches(name, list(classes), n=1, cutoff=0.85)
    return close[0] if close else None


def _closest_first(name: str, classes: Collection[str]) -> list[str]:
    """The DeviceClass names, those most like ``name`` first (``nvidia.com/gpu`` lists gpu.nvidia.com first)."""
    return sorted(classes, key=lambda c: (-difflib.SequenceMatcher(None, name, c).ratio(), c))


def claim_sentence(failure: Failure, classes: Collection[str]) -> str:
    """The first sentence for a claim-level problem; ``classes``: the DeviceClasses the cluster has."""
    d = failure.requests[0] if failure.requests else None
    if d is None:
        return failure.message
    if failure.reason == "ClassNotFound" and (m := _MISSING_CLASS.match(d.message)):
        request, name = m.groups()
        meant = meant_class(name, classes)
        if meant is not None:
            known = f"did you mean {meant}?"
        else:
            known = (
                f"the cluster has {listed(_closest_first(name, classes), 5)}"
                if classes
                else "the cluster has no DeviceClass"
            )
        return f"request {request} names DeviceClass {name}, which does not exist; {known}"
    if failure.reason == "AdminAccessDenied":
        namespace = d.claim.split("/", 1)[0]
        return (
            f"request {d.request} asks for adminAccess, which namespace {namespace} does not allow: label the "
            f"namespace {ADMIN_ACCESS_LABEL}=true"
        )
    if m := _COMPILE.match(d.message):
        owner, name, index, error = m.groups()
        return f"selector #{index} of {owner} {name} does not compile: {error}"
    return d.message or failure.message


def values_shown(devices: Sequence[tuple[str, DeviceMiss]]) -> str:
    """``(productName NVIDIA H100 80GB HBM3 on dgx-h100-0, dgx-h100-1; NVIDIA L4 on l4x4-0)``: the values the
    closest devices have for what the failing selector reads, grouped by the nodes that have them."""
    if not devices or any(len(c.shown) != 1 for _, c in devices):
        return ""
    names = {c.shown[0][0] for _, c in devices}
    if len(names) != 1:
        return ""
    counts: Counter[str] = Counter()
    nodes: dict[str, list[str]] = {}
    for node, c in devices:
        value = c.shown[0][1]
        counts[value] += 1
        if node not in nodes.setdefault(value, []):
            nodes[value].append(node)
    groups: dict[tuple[str, ...], list[str]] = {}
    for value in sorted(counts, key=lambda v: (-counts[v], v)):
        groups.setdefault(tuple(nodes[value]), []).append(value)
    ordered = sorted(groups.items(), key=lambda kv: -sum(counts[v] for v in kv[1]))
    text = "; ".join(f"{listed(values)} on {listed(list(where))}" for where, values in ordered[:3])
    return f" ({names.pop()} {text})"
