"""MigLayout (gpudra.dev/v1alpha1, cluster-scoped): how the GPUs of a set of nodes are partitioned with MIG.

The layout is written the way NVIDIA's mig-parted writes it, either by naming a config (one of mig-parted's
defaults such as ``all-balanced``, or one from a ConfigMap holding a ``version: v1`` file) or inline as
mig-parted entries. Policy Static applies the layout as written; Dynamic starts from it and lets gpudra
repartition idle capacity to follow pending MIG claims. In-use instances are never destroyed: a node whose
layout would need that reports Blocked with the claims in the way (or, with ``allowPartial``, applies what fits
around them). The controller validates entries strictly (pkg ``gpudra.mig.migparted``); this module only holds
the wire shape.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from gpudra.api.base import WireModel
from gpudra.api.crd import CrdInfo, CustomResource, PrinterColumn
from gpudra.api.meta import Condition

GROUP = "gpudra.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

MigLayoutPolicy = Literal["Static", "Dynamic"]
NodeLayoutState = Literal["pending", "applying", "success", "failed", "blocked", "invalid", "conflict"]

# Condition types of status.conditions.
APPLIED = "Applied"
PROGRESSING = "Progressing"
BLOCKED = "Blocked"
INVALID = "Invalid"


class NodeSelector(WireModel):
    """Which nodes the layout applies to."""

    match_labels: dict[str, str] | None = Field(
        default=None,
        description="Node labels that must all match. Empty or absent: every node with MIG-capable GPUs.",
    )


class ConfigMapKeyReference(WireModel):
    """A key of a ConfigMap holding a mig-parted ``version: v1`` config file."""

    namespace: str = Field(description="Namespace of the ConfigMap.")
    name: str = Field(description="Name of the ConfigMap.")
    key: str = Field(
        default="config.yaml", description="Key of the ConfigMap whose value is the config file."
    )


class MigPartedEntry(WireModel):
    """One mig-parted entry: which GPUs of a node, MIG on or off, and how many instances of each profile."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!self.mig__dash__enabled || has(self.mig__dash__devices)",
                    "message": "mig-devices is required when mig-enabled is true ({} allowed)",
                },
                {
                    "rule": "self.mig__dash__enabled || !has(self.mig__dash__devices) "
                    "|| size(self.mig__dash__devices) == 0",
                    "message": "mig-devices must be empty when mig-enabled is false",
                },
            ]
        },
    )

    device_filter: Any = Field(
        default=None,
        alias="device-filter",
        description='Optional PCI device id ("0x233010DE") or list of them: the entry applies only to GPUs of '
        "those models.",
    )
    devices: Any = Field(
        description='"all", or a list of GPU indexes on the node, that the entry applies to.',
    )
    mig_enabled: bool = Field(alias="mig-enabled", description="Whether MIG mode is enabled on these GPUs.")
    mig_devices: dict[str, Annotated[int, Field(ge=0, le=7)]] | None = Field(
        default=None,
        alias="mig-devices",
        description='Profile name to instance count, e.g. {"1g.10gb": 2, "3g.40gb": 1}. Required when '
        "mig-enabled is true ({} leaves MIG enabled with no instances); must be empty when it is false.",
    )


class MigLayoutSource(WireModel):
    """The layout: a named mig-parted config, or inline entries (exactly one)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.config) != has(self.entries)",
                    "message": "set exactly one of config or entries",
                },
                {"rule": "!has(self.configMap) || has(self.config)", "message": "configMap needs config"},
            ]
        }
    )

    config: str | None = Field(
        default=None,
        description="Name of a mig-parted config: one of mig-parted's defaults (all-disabled, all-enabled, "
        "all-balanced, all-<profile> with '+' written '.', e.g. all-1g.10gb.me), or one in configMap.",
    )
    config_map: ConfigMapKeyReference | None = Field(
        default=None,
        description="ConfigMap key holding a mig-parted version: v1 file to look config up in. Absent: "
        "mig-parted's default configs.",
    )
    entries: list[MigPartedEntry] | None = Field(
        default=None,
        min_length=1,
        description="Inline mig-parted entries (the list under one mig-configs name).",
    )


class MigLayoutSpec(WireModel):
    """The desired MIG partitioning of the selected nodes."""

    node_selector: NodeSelector = Field(
        default_factory=NodeSelector, description="The nodes whose GPUs take this layout."
    )
    policy: MigLayoutPolicy = Field(
        default="Static",
        description="Static: apply the layout as written. Dynamic: start from it and repartition idle GPUs "
        "to fit pending MIG claims; instances in use are never touched.",
    )
    layout: MigLayoutSource = Field(description="The layout, in mig-parted form.")
    allow_partial: bool = Field(
        default=False,
        description="When instances in use stand in the way, apply what fits around them instead of "
        "reporting the node Blocked (what could not be applied is in the node's message).",
    )


class MigLayoutNodeStatus(WireModel):
    """How the layout stands on one node."""

    name: str = Field(description="Name of the node.")
    state: NodeLayoutState = Field(
        default="pending",
        description="pending: not started or waiting (for the agent, a GPU reset); applying: steps running; "
        "success: the GPUs match the layout; failed: a step failed (see message); blocked: devices in use "
        "prevent it; invalid: the layout cannot exist on this node's GPUs (hardware untouched); conflict: an "
        "older MigLayout selects this node too and governs it.",
    )
    message: str = Field(default="", description="What happened on the node, in words.")
    blocked_by: list[str] | None = Field(
        default=None,
        description="ResourceClaims (namespace/name) whose prepared MIG devices block the layout.",
    )


class MigLayoutStatus(WireModel):
    """What the controller and the agents observe."""

    observed_generation: int | None = Field(
        default=None, description="The metadata.generation this status describes."
    )
    nodes_selected: int | None = Field(default=None, description="How many nodes the layout selects.")
    nodes_applied: int | None = Field(default=None, description="How many selected nodes match the layout.")
    nodes_blocked: int | None = Field(default=None, description="How many selected nodes are blocked.")
    applied: str | None = Field(default=None, description="Applied nodes of selected nodes, e.g. 3/4.")
    conditions: list[Condition] | None = Field(
        default=None,
        description="Applied (every node matches), Progressing (steps running), Blocked (in-use devices "
        "prevent it on some node), Invalid (the layout cannot exist; the message says why).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    nodes: list[MigLayoutNodeStatus] | None = Field(
        default=None,
        description="Per-node state, one entry per selected node.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )


class MigLayout(CustomResource):
    """The MIG partitioning of a set of nodes' GPUs, written as mig-parted configs are."""

    crd = CrdInfo(
        group=GROUP,
        version=VERSION,
        kind="MigLayout",
        plural="miglayouts",
        singular="miglayout",
        scope="Cluster",
        short_names=("mlay",),
        categories=("gpudra",),
        printer_columns=(
            PrinterColumn(name="Policy", json_path=".spec.policy"),
            PrinterColumn(
                name="Config", json_path=".spec.layout.config", description="mig-parted config name"
            ),
            PrinterColumn(
                name="Nodes", json_path=".status.nodesSelected", type="integer", description="Selected nodes"
            ),
            PrinterColumn(
                name="Applied", json_path=".status.applied", description="Applied nodes of selected nodes"
            ),
            PrinterColumn(
                name="Blocked",
                json_path=".status.nodesBlocked",
                type="integer",
                description="Nodes where devices in use prevent the layout",
            ),
            PrinterColumn(
                name="Invalid",
                json_path='.status.conditions[?(@.type=="Invalid")].status',
                description="The layout cannot exist on some selected node",
            ),
            PrinterColumn(name="Age", json_path=".metadata.creationTimestamp", type="date"),
        ),
        status_subresource=True,
    )

    api_version: str = API_VERSION
    kind: str = "MigLayout"
    spec: MigLayoutSpec = Field(description="The desired layout.")
    status: MigLayoutStatus | None = Field(default=None, description="The observed state.")
