"""Pure: extended resources backed by DRA (KEP-5004, Kubernetes 1.34+ with DRAExtendedResource). A container that
asks for ``nvidia.com/gpu: 2`` (or ``deviceclass.resource.kubernetes.io/<class>: 1``) gets devices of the
DeviceClass whose ``extendedResourceName`` names that resource, through one special claim per pod that the scheduler
creates: a request per container and resource, owned by the pod and annotated as the extended-resource claim."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpudra.api.core import Pod
from gpudra.cluster.controlplane.claims import pod_owner

EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"


@dataclass(frozen=True)
class ExtendedRequest:
    container: str
    resource: str
    device_class: str
    count: int
    request: str  # the request name in the claim: container-<i>-request-<j>


def class_for_resource(classes: list[dict[str, Any]]) -> dict[str, str]:
    """extended resource name -> DeviceClass name (explicit extendedResourceName and the implicit per-class name)."""
    mapping: dict[str, str] = {}
    for body in classes:
        name = body["metadata"]["name"]
        mapping[IMPLICIT_PREFIX + name] = name
        explicit = (body.get("spec") or {}).get("extendedResourceName")
        if explicit:
            mapping[explicit] = name
    return mapping


def extended_requests(pod: Pod, mapping: dict[str, str]) -> list[ExtendedRequest]:
    """The container requests that DRA must serve, in container order (limits win over requests, as for GPUs)."""
    out: list[ExtendedRequest] = []
    for i, container in enumerate(pod.spec.containers):
        resources = container.resources
        wanted = {
            **((resources.requests if resources else None) or {}),
            **((resources.limits if resources else None) or {}),
        }
        for j, resource in enumerate(sorted(r for r in wanted if r in mapping)):
            count = int(str(wanted[resource]))
            if count > 0:
                out.append(
                    ExtendedRequest(
                        container.name, resource, mapping[resource], count, f"container-{i}-request-{j}"
                    )
                )
    return out


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
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": r.request,
                        "exactly": {
                            "deviceClassName": r.device_class,
                            "allocationMode": "ExactCount",
                            "count": r.count,
                        },
                    }
                    for r in requests
                ]
            }
        },
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
