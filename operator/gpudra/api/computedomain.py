"""ComputeDomain and ComputeDomainClique (resource.nvidia.com/v1beta1), wire-compatible with NVIDIA's driver.

A ComputeDomain asks for a set of nodes whose GPUs share memory over multi-node NVLink (an IMEX domain); its
workload pods reach it through the ResourceClaimTemplate named in ``spec.channel``. The whole spec is
immutable. A ComputeDomainClique records the IMEX daemons of one ComputeDomain inside one NVLink clique.

Same fields, defaults, enums and validation as NVIDIA's CRDs, so existing objects and manifests work
unchanged. gpudra adds only what is additive: ``kubectl get computedomains`` shows a Status column, and
``status.conditions`` (optional, written only by gpudra's controller) says what is missing while the domain is
NotReady. NVIDIA's objects never set it, so their manifests and their controller's status writes still validate.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from gpudra.api.base import WireModel
from gpudra.api.crd import CrdInfo, CustomResource, PrinterColumn
from gpudra.api.meta import Condition

GROUP = "resource.nvidia.com"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"

ReadyState = Literal["Ready", "NotReady"]
AllocationMode = Literal["All", "Single"]


def _list_map(*keys: str) -> dict[str, Any]:
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


class ComputeDomainResourceClaimTemplate(WireModel):
    """The ResourceClaimTemplate the controller creates for this ComputeDomain's workload pods."""

    name: str = Field(
        description="Name of the ResourceClaimTemplate, created in the ComputeDomain's namespace. Pods "
        "reference it in spec.resourceClaims[].resourceClaimTemplateName to join the domain."
    )


class ComputeDomainChannelSpec(WireModel):
    """The IMEX channel that workload pods of this ComputeDomain receive."""

    resource_claim_template: ComputeDomainResourceClaimTemplate
    allocation_mode: AllocationMode = Field(
        default="Single",
        description="Single: each claim gets IMEX channel 0. All: each claim gets every IMEX channel of the "
        "domain (2048).",
    )


class ComputeDomainSpec(WireModel):
    """What the ComputeDomain should be. Immutable once created: delete and recreate to change it."""

    num_nodes: int = Field(
        default=0,
        ge=0,
        description="Deprecated. Expected number of nodes. 0 (recommended): nodes join as workload pods land "
        "on them and status.status follows the nodes present. Greater than 0: status.status stays NotReady "
        "until this many nodes are Ready.",
    )
    channel: ComputeDomainChannelSpec = Field(
        description="The channel workload pods claim to join the domain."
    )


class ComputeDomainNode(WireModel):
    """One node taking part in the ComputeDomain."""

    name: str = Field(description="Name of the node.")
    ip_address: str = Field(description="IP address of the node's IMEX daemon.")
    clique_id: str = Field(
        alias="cliqueID",
        description='NVLink clique of the node\'s GPUs, "<clusterUUID>.<cliqueID>" as NVML reports it; empty '
        "when the GPUs are in no clique.",
    )
    index: int | None = Field(
        default=None,
        description="Position of the node within its clique; (cliqueID, index) is unique and fixes the "
        "node's DNS name among the IMEX daemons.",
    )
    status: ReadyState = Field(
        default="NotReady", description="Ready once the node's IMEX daemon can broker memory exchanges."
    )


class ComputeDomainStatus(WireModel):
    """What the controller observes; for debugging, workloads should not depend on it."""

    model_config = ConfigDict(json_schema_extra={"required": ["status"]})

    status: ReadyState = Field(
        default="NotReady",
        description="Ready when every node present is Ready (and, with numNodes > 0, at least numNodes are).",
    )
    nodes: list[ComputeDomainNode] | None = Field(
        default=None,
        description="The nodes in the domain, one entry per node name.",
        json_schema_extra=_list_map("name"),
    )
    conditions: list[Condition] | None = Field(
        default=None,
        description="gpudra addition: Ready (the summary; its message names every missing node and why), "
        "NodesReady, CliqueConsistent. Absent when another controller writes the status.",
        json_schema_extra=_list_map("type"),
    )
    kopf: dict[str, Any] | None = Field(
        default=None,
        description="gpudra addition: the controller's own records (the spec it last handled, its handlers' "
        "progress). Kept here rather than in annotations, which the API server caps at 256 KiB together.",
    )


class ComputeDomain(CustomResource):
    """A set of nodes that run one multi-node workload with GPU memory shared over NVLink (an IMEX domain)."""

    crd = CrdInfo(
        group=GROUP,
        version=VERSION,
        kind="ComputeDomain",
        plural="computedomains",
        singular="computedomain",
        scope="Namespaced",
        short_names=("cd",),
        categories=("gpudra",),
        printer_columns=(
            PrinterColumn(name="Status", json_path=".status.status", description="Ready or NotReady"),
            PrinterColumn(
                name="Reason",
                json_path='.status.conditions[?(@.type=="Ready")].reason',
                description="Why the domain is (not) Ready (gpudra's controller only)",
            ),
            PrinterColumn(name="Age", json_path=".metadata.creationTimestamp", type="date"),
            PrinterColumn(
                name="Channel",
                json_path=".spec.channel.resourceClaimTemplate.name",
                description="ResourceClaimTemplate of the workload pods",
                priority=1,
            ),
        ),
        status_subresource=True,
    )

    api_version: str = API_VERSION
    kind: str = "ComputeDomain"
    spec: ComputeDomainSpec = Field(
        description="The requested domain. Immutable.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self == oldSelf", "message": "A computeDomain.spec is immutable"}
            ]
        },
    )
    status: ComputeDomainStatus | None = None


class ComputeDomainDaemonInfo(WireModel):
    """One IMEX daemon registered in a clique."""

    node_name: str = Field(description="Node the daemon runs on.")
    ip_address: str = Field(description="IP address the daemon serves on.")
    clique_id: str = Field(alias="cliqueID", description='The clique, "<clusterUUID>.<cliqueID>".')
    index: int | None = Field(
        default=None, description="Lowest free index in the clique when the daemon registered (below 18)."
    )
    status: ReadyState = Field(
        default="NotReady", description="Ready once the daemon can broker memory exchanges."
    )
    message: str | None = Field(
        default=None,
        description="gpudra addition: what the daemon says while it is not Ready (e.g. nvidia-imex's start-up "
        "error); the controller shows it in the ComputeDomain's conditions. Absent in NVIDIA's objects.",
    )


class ComputeDomainClique(CustomResource):
    """The IMEX daemons of one ComputeDomain in one NVLink clique, named "<computeDomainUID>.<cliqueID>"."""

    crd = CrdInfo(
        group=GROUP,
        version=VERSION,
        kind="ComputeDomainClique",
        plural="computedomaincliques",
        singular="computedomainclique",
        scope="Namespaced",
        short_names=("cdclique",),
        categories=("gpudra",),
        # a column's JSONPath gives one value and the daemons are a list: `kubectl get -o yaml` shows them
        printer_columns=(PrinterColumn(name="Age", json_path=".metadata.creationTimestamp", type="date"),),
    )

    api_version: str = API_VERSION
    kind: str = "ComputeDomainClique"
    daemons: list[ComputeDomainDaemonInfo] | None = Field(
        default=None,
        description="The registered daemons, one entry per node.",
        json_schema_extra=_list_map("nodeName"),
    )
