"""Pure: ResourceClaims generated from a pod's ResourceClaimTemplates, named and owned as Kubernetes does (which
claims a pod uses: ``gpudra.planning.podclaims``)."""

from __future__ import annotations

from typing import Any

from gpudra.api.core import Pod, PodResourceClaim
from gpudra.api.dra import ResourceClaimTemplate
from gpudra.planning.podclaims import POD_CLAIM_NAME_ANNOTATION

_MAX_GENERATE_BASE = 57  # 63 minus the hyphen and the 5 random characters the server appends


def generate_name(pod_name: str, pod_claim_name: str) -> str:
    """``<pod>-<podClaimName>-``, both parts shortened alike when too long (as kube-controller-manager does)."""
    base = f"{pod_name}-{pod_claim_name}"
    if len(base) > _MAX_GENERATE_BASE:
        half = (_MAX_GENERATE_BASE - 1) // 2
        base = f"{pod_name[:half]}-{pod_claim_name[:half]}"
    return base + "-"


def pod_owner(pod: Pod) -> dict[str, Any]:
    """The ownerReference a claim generated for a pod carries: the pod is its controller."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": pod.metadata.name,
        "uid": pod.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def claim_from_template(
    pod: Pod, pod_claim: PodResourceClaim, template: ResourceClaimTemplate
) -> dict[str, Any]:
    """The ResourceClaim body for one templated pod claim: owned by the pod (controller), annotated with the pod
    claim name, labels and annotations copied from the template's metadata."""
    meta = template.spec.metadata
    annotations = dict(meta.annotations or {}) if meta else {}
    annotations[POD_CLAIM_NAME_ANNOTATION] = pod_claim.name
    metadata: dict[str, Any] = {
        "generateName": generate_name(pod.metadata.name or "", pod_claim.name),
        "namespace": pod.metadata.namespace,
        "annotations": annotations,
        "ownerReferences": [pod_owner(pod)],
    }
    if meta and meta.labels:
        metadata["labels"] = dict(meta.labels)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": template.spec.spec.to_wire(),
    }
