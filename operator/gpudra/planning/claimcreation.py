"""Pure: why kube-controller-manager has not made a pod's claim from its ResourceClaimTemplate. While it cannot,
the pod waits with no claim to allocate (kube-scheduler says only that the claim does not exist yet), and
kube-controller-manager says why in a ``FailedResourceClaimCreation`` Warning on the pod, one per attempt, its
message starting ``PodResourceClaim <entry>: ``: the template does not exist, or the API server refused the claim
(a ResourceQuota on ``<class>.deviceclass.resource.k8s.io/devices`` that it would exceed, most often).
``gpudra explain pod`` says that instead of explaining the claim the template would make."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpudra.api.core import Pod
from gpudra.api.meta import ObjectMeta
from gpudra.planning.podclaims import may_wait_on_claims, owned_by_pods, pod_claims
from gpudra.planning.podwarnings import PodWarning, newest_warning

CREATE_WARNING = "FailedResourceClaimCreation"
"""The reason of kube-controller-manager's Warning on a pod whose claim it could not make (1.37)."""
NOT_CREATED_REASON = "ClaimNotCreated"
"""What ``gpudra explain`` says of a template's claim kube-controller-manager cannot make."""


def creation_warning(pod: Pod, events: Iterable[Mapping[str, Any]], entry: str) -> PodWarning | None:
    """kube-controller-manager's newest Warning of the pod's ``entry`` (``spec.resourceClaims[].name``)."""
    return newest_warning(pod, events, CREATE_WARNING, prefix=f"PodResourceClaim {entry}: ")


def not_created_note(template: str) -> str:
    """What a claim not made yet is, as `gpudra explain` and the web view say it."""
    return f"not created yet, from claim template {template}"


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


@dataclass(frozen=True)
class UnmadeClaim:
    """A waiting pod's entry whose claim kube-controller-manager has not made from its template (yet)."""

    namespace: str
    pod: str
    entry: str  # spec.resourceClaims[].name
    template: str
    template_exists: bool

    @property
    def name(self) -> str:
        """The claim's name as ``gpudra explain`` gives it: kube-controller-manager's, without its random suffix."""
        return f"{self.pod}-{self.entry}"


def unmade_claims(
    pods: Iterable[Pod], claims: Iterable[ObjectMeta], templates: Collection[tuple[str, str]]
) -> list[UnmadeClaim]:
    """The template claims of waiting pods (gated ones too: kube-controller-manager makes their claims) that no
    ResourceClaim stands for yet: neither recorded in the pod's status nor owned by it. ``claims``: the metadata
    of the claims that exist; ``templates``: (namespace, name) of the templates that exist."""
    owned = owned_by_pods(claims)
    out = []
    for pod in pods:
        if not may_wait_on_claims(pod, gated=True):
            continue
        namespace = pod.metadata.namespace or "default"
        names = {c.name: c.resource_claim_template_name or "" for c in pod.spec.resource_claims or []}
        for entry in pod_claims(pod, owned.get(pod.metadata.uid or "", []), {}):
            if entry.source == "template" and entry.name is None:
                template = names.get(entry.pod_claim, "")
                exists = (namespace, template) in templates
                out.append(UnmadeClaim(namespace, pod.metadata.name or "", entry.pod_claim, template, exists))
    return out


def unmade_words(unmade: UnmadeClaim) -> str:
    """What the web view says of a claim not made: that the template does not exist, or where kube-controller-
    manager's reason is (its Warnings are not watched)."""
    if not unmade.template_exists:
        return not_created_words(unmade.namespace, unmade.template, None)
    return (
        f"kube-controller-manager makes it once it can; while it cannot (a ResourceQuota the claim would exceed,"
        f" most often) it says why in a {CREATE_WARNING} Warning on pod {unmade.pod}: `gpudra explain pod"
        f" {unmade.pod} -n {unmade.namespace}` gives it"
    )
