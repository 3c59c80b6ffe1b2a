"""Pure: why kube-controller-manager has not made a pod's claim from its ResourceClaimTemplate. While it cannot,
the pod waits with no claim to allocate (kube-scheduler says only that the claim does not exist yet), and
kube-controller-manager says why in a ``FailedResourceClaimCreation`` Warning on the pod, one per attempt, its
message starting ``PodResourceClaim <entry>: ``: the template does not exist, or the API server refused the claim
(a ResourceQuota on ``<class>.deviceclass.resource.k8s.io/devices`` that it would exceed, most often).
``gpudra explain pod`` says that instead of explaining the claim the template would make."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpudra.api.core import Pod
from gpudra.planning.podwarnings import PodWarning, newest_warning

CREATE_WARNING = "FailedResourceClaimCreation"
"""The reason of kube-controller-manager's Warning on a pod whose claim it could not make (1.37)."""
NOT_CREATED_REASON = "ClaimNotCreated"
"""What ``gpudra explain`` says of a template's claim kube-controller-manager cannot make."""


def creation_warning(pod: Pod, events: Iterable[Mapping[str, Any]], entry: str) -> PodWarning | None:
    """kube-controller-manager's newest Warning of the pod's ``entry`` (``spec.resourceClaims[].name``)."""
    return newest_warning(pod, events, CREATE_WARNING, prefix=f"PodResourceClaim {entry}: ")


def not_created_words(namespace: str, template: str, warning: PodWarning | None) -> str:
    """Why the claim is not made: kube-controller-manager's words (with where to look for a quota it exceeds),
    or, before it said anything, that the template does not exist."""
    if warning is None:
        return (
            f"its ResourceClaimTemplate {template} does not exist in namespace {namespace} (`kubectl get"
            f" resourceclaimtemplates -n {namespace}` lists them); kube-controller-manager makes the claim once it"
            " does"
        )
    words = f"kube-controller-manager could not make it ({warning.times()}): {warning.message}"
    if "exceeded quota:" in warning.message:
        words += (
            f". `kubectl describe resourcequota -n {namespace}` shows what the namespace may use and uses;"
            " kube-controller-manager makes the claim once it fits"
        )
    return words
