"""The API resources gpudra reads and writes, as (group, version, plural) coordinates with their URL paths."""

from __future__ import annotations

from dataclasses import dataclass


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


NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", namespaced=True)
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False)
POD_GROUPS = Resource("scheduling.k8s.io", "v1beta1", "podgroups", "PodGroup", namespaced=True)
"""Kubernetes 1.37 with GenericWorkload and the scheduling.k8s.io/v1beta1 group version on (read by discovery only)."""
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
PODS = Resource("", "v1", "pods", "Pod", namespaced=True)
EVENTS = Resource("", "v1", "events", "Event", namespaced=True)
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False)
DEVICE_CLASSES = Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", namespaced=False)
RESOURCE_SLICES = Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", namespaced=False)
RESOURCE_CLAIMS = Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", namespaced=True)
RESOURCE_CLAIM_TEMPLATES = Resource(
    "resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", namespaced=True
)


def device_taint_rules(version: str = "v1") -> Resource:
    """DeviceTaintRule at ``version``: resource.k8s.io/v1 from Kubernetes 1.37; v1alpha3 (off by default) up to 1.35,
    v1beta2 (off by default) in 1.36. The fields gpudra reads are the same in each."""
    return Resource("resource.k8s.io", version, "devicetaintrules", "DeviceTaintRule", namespaced=False)


DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", namespaced=True)
DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet", namespaced=True)
REPLICASETS = Resource("apps", "v1", "replicasets", "ReplicaSet", namespaced=True)
JOBS = Resource("batch", "v1", "jobs", "Job", namespaced=True)
COMPUTE_DOMAINS = Resource(
    "resource.nvidia.com", "v1beta1", "computedomains", "ComputeDomain", namespaced=True
)
COMPUTE_DOMAIN_CLIQUES = Resource(
    "resource.nvidia.com", "v1beta1", "computedomaincliques", "ComputeDomainClique", namespaced=True
)
