"""What an allocated claim's status says of its prepare: the devices whose driver wrote them not Ready (the agent
writes ``status.devices`` with a ``Ready`` condition at each prepare, ``False`` with the failure's reason and
message when it failed). A pod whose claim is allocated but not prepared waits in ContainerCreating, and a kubelet
tries the prepare again only at its next periodic sync of the pod, a minute or more later: ``gpudra explain`` says
both. Where no driver got to write (its kubelet plugin is not registered, the kubelet could not call it), the
kubelet's own Warning on the pod says why."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpudra.api.core import Pod
from gpudra.api.dra import ResourceClaim
from gpudra.planning.podwarnings import PodWarning, newest_warning

PREPARE_WARNING = "FailedPrepareDynamicResources"
"""The reason of a kubelet's Warning on a pod whose claims it could not prepare (1.37 kuberuntime)."""
_NOT_REGISTERED = re.compile(r"DRA driver (\S+) is not registered$")

RETRY_WORDS = (
    "the kubelet tries the prepare again at its next sync of the pod, a minute or more after it failed"
)


@dataclass(frozen=True)
class NotPrepared:
    """One device of the claim its driver could not prepare, as the status says."""

    driver: str
    pool: str
    device: str
    reason: str
    message: str


def not_prepared(claim: ResourceClaim) -> tuple[NotPrepared, ...]:
    """The claim's devices whose ``Ready`` condition is ``False``, in the status's order."""
    found = []
    for entry in (claim.status.devices if claim.status is not None else None) or []:
        ready = next((c for c in entry.conditions or [] if c.type == "Ready"), None)
        if ready is not None and ready.status == "False":
            found.append(NotPrepared(entry.driver, entry.pool, entry.device, ready.reason, ready.message))
    return tuple(found)


def not_prepared_words(devices: tuple[NotPrepared, ...]) -> list[str]:
    """One line per distinct failure (a claim of eight GPUs that failed for one reason says it once)."""
    said: dict[tuple[str, str], list[str]] = {}
    for d in devices:
        said.setdefault((d.reason, d.message), []).append(d.device)
    return [
        f"not prepared ({', '.join(names)}): {reason}: {message}" for (reason, message), names in said.items()
    ]


def prepared(claim: ResourceClaim) -> bool:
    """Every device of the claim's allocation has a ``Ready=True`` entry in its status."""
    status = claim.status
    ready = {
        (d.driver, d.pool, d.device)
        for d in (status.devices if status is not None else None) or []
        if any(c.type == "Ready" and c.status == "True" for c in d.conditions or [])
    }
    results = claim.allocation.results if claim.allocation is not None else []
    return bool(results) and all((r.driver, r.pool, r.device) in ready for r in results)


@dataclass(frozen=True)
class KubeletWarning:
    """The kubelet's latest Warning that it could not prepare a pod's claims."""

    node: str
    message: str
    count: int
    last: str
    """When it was last said (RFC 3339)."""


def waits_for_prepare(pod: Pod, claims: Sequence[ResourceClaim]) -> bool:
    """The pod is bound and not started (phase Pending), ``claims`` (the pod's) are all allocated, not all of them
    read prepared, and none says why already (:func:`not_prepared`: the driver's own words are the better ones):
    what the kubelet last said of its prepare still says why the pod waits."""
    if not pod.spec.node_name or (pod.status is not None and pod.status.phase not in (None, "Pending")):
        return False
    if any(c.allocation is None or not_prepared(c) for c in claims):
        return False
    return not all(prepared(c) for c in claims)


def kubelet_warning(pod: Pod, events: Iterable[Mapping[str, Any]]) -> KubeletWarning | None:
    """The newest of ``events`` (the pod's, as listed) that is the kubelet's ``FailedPrepareDynamicResources``
    Warning on this pod (bound to a node); None when there is none."""
    newest = newest_warning(pod, events, PREPARE_WARNING)
    if newest is None or not pod.spec.node_name:
        return None
    return KubeletWarning(pod.spec.node_name, newest.message, newest.count, newest.last)


def kubelet_warning_words(warning: KubeletWarning) -> list[str]:
    """What the kubelet said, how often and when, what it means when the driver is not registered there, and when
    the kubelet tries again."""
    said = PodWarning(warning.message, warning.count, warning.last)
    words = [f"the kubelet on node {warning.node} says ({said.times()}): {warning.message}"]
    missing = _NOT_REGISTERED.search(warning.message)
    if missing is not None:
        words.append(
            f"no kubelet plugin of {missing.group(1)} is registered on node {warning.node}: is gpudra's agent"
            f" running there? (`kubectl get pods -A -o wide --field-selector spec.nodeName={warning.node}`)"
        )
    return [*words, RETRY_WORDS]
