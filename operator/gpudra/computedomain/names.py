"""Names, labels and driver names of a ComputeDomain's objects, shared by the other modules.

Objects gpudra creates for a domain carry NVIDIA's object label ``resource.nvidia.com/computeDomain=<uid>``
(tools that look children up by it keep working). Nodes do NOT get NVIDIA's node label of the same key: one
key holds one value, so a node labelled for a second domain would lose the first domain's label and its
daemon (the label is what makes NVIDIA's driver one-domain-per-node at the Kubernetes level). gpudra labels
a node once per domain, ``computedomain.gpudra.dev/<uid>=true``: the key name (a 36-character UID) fits the
63-character limit of a label name, and any number of domains can label one node without touching each
other. Whether a node may actually serve several domains is the hardware question ``index`` answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

OBJECT_LABEL: Final = "resource.nvidia.com/computeDomain"
"""On every child object: the UID of the domain it belongs to (NVIDIA's key, compatible selectors)."""
NODE_LABEL_PREFIX: Final = "computedomain.gpudra.dev/"
"""Node label key prefix; the full key is ``computedomain.gpudra.dev/<uid>`` with value ``"true"``."""
NODE_LABEL_VALUE: Final = "true"
COMPONENT_LABEL: Final = "app.kubernetes.io/component"
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "gpudra"
DOMAIN_ANNOTATION: Final = "computedomain.gpudra.dev/domain"
"""On children in the driver's namespace: ``<namespace>/<name>`` of the domain, for people reading them."""

DEFAULT_CHANNEL_CLASS: Final = "compute-domain-default-channel.nvidia.com"
SHARED_CHANNEL_CLASS: Final = "compute-domain-shared-channel.gpudra.dev"
"""Selects the domain channels the controller publishes for PodGroup-scoped domains (type ``domain-channel``);
the default channel class never matches them, so no other domain's claim can take one."""
SHARED_CHANNEL_TYPE: Final = "domain-channel"
CHANNEL_SCOPE_ANNOTATION: Final = "computedomain.gpudra.dev/channel-scope"
"""On a ComputeDomain: ``Pod`` (default: each pod's claim holds a channel of its own node) or ``PodGroup`` (one
claim, shared by every pod of a PodGroup, holds the domain's channel on every node; see ``children``)."""
SHARED_POOL_PREFIX: Final = "computedomain-"
DAEMON_CLASS: Final = "compute-domain-daemon.nvidia.com"
CHANNEL_REQUEST: Final = "channel"
DAEMON_REQUEST: Final = "daemon"

ChannelScope = Literal["Pod", "PodGroup"]
CHANNEL_SCOPES: Final[tuple[ChannelScope, ...]] = ("Pod", "PodGroup")

DaemonMode = Literal["daemonset", "host-managed"]
"""How IMEX daemons run. daemonset: one DaemonSet per domain, its pod runs that domain's nvidia-imex on
each node of the domain (NVIDIA's model). host-managed: one nvidia-imex per node, outside the domain's
objects, serving every domain of its clique; domains are kept apart by IMEX channel (see ``index``)."""


@dataclass(frozen=True, slots=True)
class DriverNames:
    """The two DRA driver names (NVIDIA's by default; configurable for side-by-side installs)."""

    gpu: str = "gpu.nvidia.com"
    compute_domain: str = "compute-domain.nvidia.com"


def node_label_key(domain_uid: str) -> str:
    """The node label that schedules this domain's daemon on a node."""
    return f"{NODE_LABEL_PREFIX}{domain_uid}"


def daemon_set_name(domain_uid: str) -> str:
    return f"computedomain-daemon-{domain_uid}"


def daemon_template_name(domain_uid: str) -> str:
    """The daemon ResourceClaimTemplate (in the driver's namespace, beside the DaemonSet)."""
    return f"computedomain-daemon-{domain_uid}"


def clique_object_name(domain_uid: str, clique_id: str) -> str:
    """The ComputeDomainClique holding this domain's daemons of one clique: ``<uid>.<cliqueID>``."""
    return f"{domain_uid}.{clique_id}"


def shared_pool_name(domain_uid: str) -> str:
    """The pool (and ResourceSlice) of a PodGroup-scoped domain's channel: ``computedomain-<uid>``."""
    return f"{SHARED_POOL_PREFIX}{domain_uid}"


def shared_pool_domain(pool: str) -> str | None:
    """The domain UID of a PodGroup-scoped domain's channel pool, None for any other pool (a node's)."""
    if not pool.startswith(SHARED_POOL_PREFIX):
        return None
    uid = pool.removeprefix(SHARED_POOL_PREFIX)
    return uid if len(uid) == 36 and uid.count("-") == 4 else None
