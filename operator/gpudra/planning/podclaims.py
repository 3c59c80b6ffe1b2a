"""Pure: the claims a pod waits on, for ``gpudra explain pod``: each entry of ``spec.resourceClaims`` by the claim
that serves it (named, or made from a template and found through ``status.resourceClaimStatuses``), and a
template's claim that does not exist yet as the claim kube-controller-manager would make from it.

Implicit claims for extended resources (``nvidia.com/gpu: 1`` served by a DeviceClass's extendedResourceName,
issue 32's second item) are not listed yet: they join this list as entries of their own ``source``, the claim
kube-scheduler made (``status.extendedResourceClaimStatus``) by its name, one not made yet as the claim it would
make from the pod's requests."""

from __future__ import annotations

from dataclasses import dataclass

from gpudra.api.core import Pod
from gpudra.api.dra import ResourceClaim, ResourceClaimTemplate
from gpudra.api.meta import ObjectMeta


@dataclass(frozen=True)
class PodClaim:
    """One claim of the pod: ``name`` of the ResourceClaim in the pod's namespace, None while a template's claim
    does not exist yet (``template`` names the template to make it from)."""

    entry: str
    """The pod's name for it (``spec.resourceClaims[].name``)."""
    source: str
    """"named" or "template"."""
    name: str | None = None
    template: str | None = None


def pod_claims(pod: Pod) -> list[PodClaim]:
    """The pod's claims in ``spec.resourceClaims`` order."""
    made = {
        s.name: s.resource_claim_name
        for s in (pod.status.resource_claim_statuses if pod.status else None) or ()
    }
    out: list[PodClaim] = []
    for entry in (pod.spec.resource_claims if pod.spec else None) or ():
        if entry.resource_claim_name:
            out.append(PodClaim(entry.name, "named", name=entry.resource_claim_name))
        elif entry.resource_claim_template_name:
            template = entry.resource_claim_template_name
            out.append(PodClaim(entry.name, "template", name=made.get(entry.name), template=template))
    return out


def claim_from_template(pod: Pod, entry: str, template: ResourceClaimTemplate) -> ResourceClaim:
    """The claim kube-controller-manager would make for the pod's entry (named as it names them,
    ``<pod>-<entry>-``, with its random suffix left out)."""
    namespace = pod.metadata.namespace or "default"
    meta = template.spec.metadata
    return ResourceClaim(
        metadata=ObjectMeta(
            name=f"{pod.metadata.name}-{entry}",
            namespace=namespace,
            labels=(meta.labels if meta else None),
            annotations=(meta.annotations if meta else None),
        ),
        spec=template.spec.spec,
    )
