"""The API resources gpudra reads and writes, as (group, version, plural) coordinates with their URL paths. A
``TypedResource`` also names the gpudra.api model its objects are read as (``KubeClient.get``/``list``); a plain
``Resource`` has none and is read as wire dicts (``get_raw``/``list_raw``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from gpudra.api.base import WireModel
from gpudra.api.computedomain import ComputeDomain, ComputeDomainClique
from gpudra.api.core import Namespace, Node, Pod
from gpudra.api.dra import DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate, ResourceSlice

M = TypeVar("M", bound=WireModel)


@dataclass(frozen=True, slots=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
            if subresource is not None:
                base += f"/{subresource}"
        return base


@dataclass(frozen=True, slots=True)
class TypedResource(Resource, Generic[M]):
    """A resource whose objects gpudra reads as ``model``."""

    model: type[M]


NAMESPACES = TypedResource("", "v1", "namespaces", "Namespace", namespaced=False, model=Namespace)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", namespaced=True)
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False)
POD_GROUPS = Resource("scheduling.k8s.io", "v1beta1", "podgroups", "PodGroup", namespaced=True)
"""Kubernetes 1.37 with GenericWorkload and the scheduling.k8s.io/v1beta1 group version on (read by discovery only)."""
POD_GROUPS_V1ALPHA2 = Resource("scheduling.k8s.io", "v1alpha2", "podgroups", "PodGroup", namespaced=True)
"""Kubernetes 1.36's PodGroup API, the same spec as 1.37's v1beta1 (read by discovery only)."""
NODES = TypedResource("", "v1", "nodes", "Node", namespaced=False, model=Node)
PODS = TypedResource("", "v1", "pods", "Pod", namespaced=True, model=Pod)
EVENTS = Resource("", "v1", "events", "Event", namespaced=True)
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False)
DEVICE_CLASSES = TypedResource(
    "resource.k8s.io", "v1", "deviceclasses", "DeviceClass", namespaced=False, model=DeviceClass
)
RESOURCE_SLICES = TypedResource(
    "resource.k8s.io", "v1", "resourceslices", "ResourceSlice", namespaced=False, model=ResourceSlice
)
RESOURCE_CLAIMS = TypedResource(
    "resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", namespaced=True, model=ResourceClaim
)
RESOURCE_CLAIM_TEMPLATES = TypedResource(
    "resource.k8s.io",
    "v1",
    "resourceclaimtemplates",
    "ResourceClaimTemplate",
    namespaced=True,
    model=ResourceClaimTemplate,
)


def device_taint_rules(version: str = "v1") -> TypedResource[DeviceTaintRule]:
    """DeviceTaintRule at ``version``: resource.k8s.io/v1 from Kubernetes 1.37; v1alpha3 (off by default) up to 1.35,
    v1beta2 (off by default) in 1.36. The fields gpudra reads are the same in each."""
    return TypedResource(
        "resource.k8s.io",
        version,
        "devicetaintrules",
        "DeviceTaintRule",
        namespaced=False,
        model=DeviceTaintRule,
    )


DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", namespaced=True)
DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet", namespaced=True)
REPLICASETS = Resource("apps", "v1", "replicasets", "ReplicaSet", namespaced=True)
JOBS = Resource("batch", "v1", "jobs", "Job", namespaced=True)
COMPUTE_DOMAINS = TypedResource(
    "resource.nvidia.com", "v1beta1", "computedomains", "ComputeDomain", namespaced=True, model=ComputeDomain
)
COMPUTE_DOMAIN_CLIQUES = TypedResource(
    "resource.nvidia.com",
    "v1beta1",
    "computedomaincliques",
    "ComputeDomainClique",
    namespaced=True,
    model=ComputeDomainClique,
)
