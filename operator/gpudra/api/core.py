"""core/v1 models gpudra reads: the parts of Pod and Node that concern device claims and scheduling."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gpudra.api.base import WireModel
from gpudra.api.meta import Condition, ObjectMeta


class PodResourceClaim(WireModel):
    """pod.spec.resourceClaims[]: exactly one of resourceClaimName and resourceClaimTemplateName."""

    name: str
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


class PodResourceClaimStatus(WireModel):
    name: str
    resource_claim_name: str | None = None


class ContainerClaim(WireModel):
    name: str
    request: str | None = None


class ContainerResources(WireModel):
    claims: list[ContainerClaim] | None = None
    requests: dict[str, Any] | None = None
    limits: dict[str, Any] | None = None


class Container(WireModel):
    name: str
    image: str | None = None
    resources: ContainerResources | None = None


class PodSpec(WireModel):
    node_name: str | None = None
    node_selector: dict[str, str] | None = None
    scheduler_name: str | None = None
    resource_claims: list[PodResourceClaim] | None = None
    containers: list[Container] = Field(default_factory=list)
    init_containers: list[Container] | None = None
    restart_policy: str | None = None
    tolerations: list[dict[str, Any]] | None = None
    affinity: dict[str, Any] | None = None
    scheduling_gates: list[dict[str, Any]] | None = None


class ContainerStateWaiting(WireModel):
    reason: str = ""
    message: str = ""


class ContainerStateTerminated(WireModel):
    exit_code: int = 0
    reason: str = ""
    message: str = ""


class ContainerState(WireModel):
    waiting: ContainerStateWaiting | None = None
    terminated: ContainerStateTerminated | None = None


class ContainerStatus(WireModel):
    name: str
    state: ContainerState = Field(default_factory=ContainerState)
    restart_count: int = 0


class PodExtendedResourceClaimStatus(WireModel):
    """pod.status.extendedResourceClaimStatus: the claim kube-scheduler made for the pod's extended resources."""

    resource_claim_name: str
    request_mappings: list[dict[str, Any]] | None = None


class PodStatus(WireModel):
    phase: str | None = None
    resource_claim_statuses: list[PodResourceClaimStatus] | None = None
    extended_resource_claim_status: PodExtendedResourceClaimStatus | None = None
    conditions: list[dict[str, Any]] | None = None
    container_statuses: list[ContainerStatus] | None = None


class Pod(WireModel):
    api_version: str = "v1"
    kind: str = "Pod"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec = Field(default_factory=PodSpec)
    status: PodStatus | None = None


class PodTemplateSpec(WireModel):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec = Field(default_factory=PodSpec)


class WorkloadSpec(WireModel):
    replicas: int | None = None
    parallelism: int | None = None
    completions: int | None = None
    template: PodTemplateSpec = Field(default_factory=PodTemplateSpec)


class Workload(WireModel):
    """A Deployment, Job or DaemonSet: what the stand-in workload controllers read."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: WorkloadSpec = Field(default_factory=WorkloadSpec)


class Taint(WireModel):
    key: str
    value: str | None = None
    effect: str


class NodeSpec(WireModel):
    unschedulable: bool | None = None
    taints: list[Taint] | None = None


class NodeStatus(WireModel):
    capacity: dict[str, str | int] | None = None
    allocatable: dict[str, str | int] | None = None
    conditions: list[Condition] | None = None


class Node(WireModel):
    """core/v1 Node: labels, taints, cordon and allocatable resources (what scheduling reads)."""

    api_version: str = "v1"
    kind: str = "Node"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: NodeSpec = Field(default_factory=NodeSpec)
    status: NodeStatus | None = None


class Namespace(WireModel):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
