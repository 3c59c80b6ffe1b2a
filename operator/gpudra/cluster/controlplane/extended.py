"""Extended resources backed by DRA (KEP-5004, Kubernetes 1.34+ with DRAExtendedResource): the one claim per pod
that kube-scheduler creates for a container asking for ``nvidia.com/gpu: 2`` (or
``deviceclass.resource.kubernetes.io/<class>: 1``), owned by the pod and annotated as the extended-resource claim,
and the pod status that records it. Which requests and classes: ``gpudra.planning.podclaims``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpudra.api.core import Pod
from gpudra.cluster.controlplane.claims import pod_owner
from gpudra.planning.podclaims import (
    EXTENDED_CLAIM_ANNOTATION,
    ExtendedRequest,
    extended_claim_spec,
    extended_resource_classes,
)


def class_for_resource(classes: Iterable[dict[str, Any]]) -> dict[str, str]:
    """extended resource name -> DeviceClass name, from DeviceClass bodies."""
    return extended_resource_classes(
        (body["metadata"]["name"], (body.get("spec") or {}).get("extendedResourceName")) for body in classes
    )


def extended_claim(pod: Pod, requests: list[ExtendedRequest]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": f"{(pod.metadata.name or '')[:40]}-extended-resources-",
            "namespace": pod.metadata.namespace,
            "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
            "ownerReferences": [pod_owner(pod)],
        },
        "spec": extended_claim_spec(requests).to_wire(),
    }


def extended_status(claim_name: str, requests: list[ExtendedRequest]) -> dict[str, Any]:
    """pod.status.extendedResourceClaimStatus."""
    return {
        "resourceClaimName": claim_name,
        "requestMappings": [
            {"containerName": r.container, "resourceName": r.resource, "requestName": r.request}
            for r in requests
        ],
    }
