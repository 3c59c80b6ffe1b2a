"""Pure: the desired children and the observed status of a ComputeDomain, and the IMEX facts behind them.

No I/O and no awaits; every function maps models (or wire dicts) to models. Modules:
``names`` (names, labels and driver names shared by the others), ``children`` (the objects the controller
applies for a domain), ``index`` (daemon indices within a clique, channel leases, which domains may share a
node), ``status`` (status.nodes, status.status, conditions, and the minimal status patch), ``channels``
(the devices the compute-domain kubelet plugin publishes and what it injects for a prepared channel).
"""

from gpudra.computedomain.channels import (
    CHANNEL_DEVICE,
    DAEMON_DEVICE,
    PROC_DEVICES_NAME,
    channel_injection,
    check_daemon_ready,
    compute_domain_devices,
)
from gpudra.computedomain.children import DaemonPodSettings, channel_scope, child_selector, desired_children
from gpudra.computedomain.clique import NodeClique, clique_label_patch, multi_node_nvlink, node_clique
from gpudra.computedomain.entries import JsonPatch, joining_entry, own_entry_patch, release_patch
from gpudra.computedomain.index import ChannelLease, DomainRef, assign_channels, check_node_admits
from gpudra.computedomain.names import (
    CHANNEL_SCOPE_ANNOTATION,
    COMPONENT_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NODE_LABEL_VALUE,
    OBJECT_LABEL,
    DaemonMode,
    DriverNames,
    clique_object_name,
    node_label_key,
    shared_pool_domain,
)
from gpudra.computedomain.status import DomainStatus, status_patch
from gpudra.computedomain.view import DomainView

__all__ = [
    "CHANNEL_DEVICE",
    "CHANNEL_SCOPE_ANNOTATION",
    "COMPONENT_LABEL",
    "DAEMON_DEVICE",
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "NODE_LABEL_VALUE",
    "OBJECT_LABEL",
    "PROC_DEVICES_NAME",
    "ChannelLease",
    "DaemonMode",
    "DaemonPodSettings",
    "DomainRef",
    "DomainStatus",
    "DomainView",
    "DriverNames",
    "JsonPatch",
    "NodeClique",
    "assign_channels",
    "channel_injection",
    "channel_scope",
    "check_daemon_ready",
    "check_node_admits",
    "child_selector",
    "clique_label_patch",
    "clique_object_name",
    "compute_domain_devices",
    "desired_children",
    "joining_entry",
    "multi_node_nvlink",
    "node_clique",
    "node_label_key",
    "own_entry_patch",
    "release_patch",
    "shared_pool_domain",
    "status_patch",
]
