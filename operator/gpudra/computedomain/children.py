"""The objects the controller applies for a ComputeDomain, as wire dicts ready for server-side apply.

For a domain ``d`` (UID ``u``) in namespace ``ns``:

- the workload ResourceClaimTemplate ``d.spec.channel.resourceClaimTemplate.name`` in ``ns``: one request
  ``channel`` of class compute-domain-default-channel.nvidia.com, configured with
  ComputeDomainChannelConfig{domainID: u, allocationMode} for the compute-domain driver. Pods name it in
  ``spec.resourceClaims`` to join the domain.
- the daemon ResourceClaimTemplate ``computedomain-daemon-<u>`` in the driver's namespace: one request
  ``daemon`` of class compute-domain-daemon.nvidia.com with ComputeDomainDaemonConfig{domainID: u}.
- with the annotation ``computedomain.gpudra.dev/channel-scope: PodGroup``: the ResourceSlice
  ``computedomain-<u>`` (cluster-scoped, driver compute-domain.nvidia.com, pool ``computedomain-<u>``) with one
  device ``channel-0`` {type: domain-channel, id: 0, domainID: u} reachable from every node in an NVLink clique
  (nodeSelector: label ``nvidia.com/gpu.clique`` exists). The workload template then asks for that device (class
  compute-domain-shared-channel.gpudra.dev, selector domainID == u) instead of a node's own channel. A
  ResourceClaim of a node-local device pins every pod sharing it to that node; this device is not node-local,
  so one claim made for a whole PodGroup (Kubernetes' DRAWorkloadResourceClaims) serves pods on any number of
  nodes, each node's agent preparing it there, and ``status.reservedFor`` names the PodGroup, not 256 pods at most.
- daemonset mode only: the DaemonSet ``computedomain-daemon-<u>`` in the driver's namespace, selecting
  nodes labelled ``computedomain.gpudra.dev/<u>=true`` (one label key per domain, see ``names``); its pods
  claim the daemon template and run non-root, read-only, without capabilities (Pod Security "restricted").

Owner references. Kubernetes' garbage collector only honours an owner in the dependent's own namespace; a
namespaced dependent whose owner lives in another namespace is treated as orphaned and deleted at once.
So only children in the domain's namespace point to the domain; children in the driver's namespace carry
the ``resource.nvidia.com/computeDomain=<u>`` label and the ``computedomain.gpudra.dev/domain``
annotation instead, and the controller deletes them by label when the domain goes (its finalizer). When
the driver runs in the domain's namespace every child gets the owner reference.

Deterministic: the same inputs give equal dicts (no timestamps, no random names), so applying them twice
is a no-op.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpudra.api.computedomain import ComputeDomain
from gpudra.api.nvidia import ComputeDomainChannelConfig, ComputeDomainDaemonConfig
from gpudra.computedomain.channels import CHANNEL_DEVICE
from gpudra.computedomain.clique import CLIQUE_LABEL
from gpudra.computedomain.names import (
    CHANNEL_REQUEST,
    CHANNEL_SCOPE_ANNOTATION,
    CHANNEL_SCOPES,
    COMPONENT_LABEL,
    DAEMON_CLASS,
    DAEMON_REQUEST,
    DEFAULT_CHANNEL_CLASS,
    DOMAIN_ANNOTATION,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NODE_LABEL_VALUE,
    OBJECT_LABEL,
    SHARED_CHANNEL_CLASS,
    SHARED_CHANNEL_TYPE,
    ChannelScope,
    DaemonMode,
    DriverNames,
    daemon_set_name,
    daemon_template_name,
    node_label_key,
    shared_pool_name,
)
from gpudra.errors import InvalidInputError

DAEMON_CONTAINER = "compute-domain-daemon"
DAEMON_CLAIM = "compute-domain-daemon"
DAEMON_MODES: tuple[DaemonMode, ...] = ("daemonset", "host-managed")


def restricted_security() -> tuple[dict[str, Any], dict[str, Any]]:
    """(pod, container) security contexts of the daemon pods: as the controller runs (the image's non-root user,
    Pod Security "restricted"). The daemon only registers its node in its clique through the API server; what it
    needs from the node (its clique id) comes in its claim's CDI spec."""
    pod: dict[str, Any] = {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    container: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    return pod, container


@dataclass(frozen=True, slots=True)
class DaemonPodSettings:
    """Optional knobs of the daemon pods; the defaults suit most clusters."""

    service_account: str | None = "gpudra-imex-daemon"
    """May read and write ComputeDomainCliques in the driver's namespace (manifests/base/rbac-imex-daemon.yaml)."""
    priority_class: str | None = "system-node-critical"
    """Daemons gate their domain's workloads; schedule them ahead of those (a busy scheduler otherwise
    delays them by tens of seconds at scale)."""
    cpu: str = "100m"
    memory: str = "128Mi"
    """Equal requests and limits: Guaranteed QoS, last to be evicted under node pressure."""
    tolerate_all_taints: bool = True
    """The daemon must run wherever the domain's workload landed, whatever taints let that workload in."""
    image_pull_secrets: tuple[str, ...] = ()
    """Secrets the daemon pods pull their image with (GPUDRA_IMEX_DAEMON_IMAGE_PULL_SECRETS: the chart's own)."""
    env: tuple[tuple[str, str], ...] = ()
    """More environment variables of the daemon container (``GPUDRA_IMEX_DAEMON_ENV``): on a cluster without a
    service proxy, ``KUBERNETES_SERVICE_HOST`` and ``KUBERNETES_SERVICE_PORT``, as the driver's own pods get them."""


@dataclass(frozen=True, slots=True)
class Children:
    """The desired children of one domain."""

    workload_template: dict[str, Any]
    daemon_template: dict[str, Any]
    daemon_set: dict[str, Any] | None
    shared_channel: dict[str, Any] | None
    """PodGroup scope only: the ResourceSlice holding the domain's channel for every node."""
    node_label: tuple[str, str]
    """The (key, value) that schedules this domain's daemon on a node (the plugin sets it at prepare)."""

    def objects(self) -> list[dict[str, Any]]:
        """Every child, templates first (the DaemonSet's pods need the daemon template to exist)."""
        found = [self.workload_template, self.daemon_template]
        if self.shared_channel is not None:
            found.append(self.shared_channel)
        if self.daemon_set is not None:
            found.append(self.daemon_set)
        return found


def _identity(domain: ComputeDomain) -> tuple[str, str, str]:
    meta = domain.metadata
    if not meta.uid or not meta.name or not meta.namespace:
        raise InvalidInputError(
            "a ComputeDomain needs metadata.uid, metadata.name and metadata.namespace before its children "
            f"can be built (got uid={meta.uid!r}, name={meta.name!r}, namespace={meta.namespace!r})"
        )
    return meta.uid, meta.name, meta.namespace


def _owner_reference(domain: ComputeDomain, uid: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": domain.api_version,
        "kind": domain.kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(domain: ComputeDomain, name: str, namespace: str, component: str) -> dict[str, Any]:
    uid, domain_name, domain_namespace = _identity(domain)
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {OBJECT_LABEL: uid, COMPONENT_LABEL: component, MANAGED_BY_LABEL: MANAGED_BY},
    }
    if namespace == domain_namespace:
        meta["ownerReferences"] = [_owner_reference(domain, uid, domain_name)]
    else:
        meta["annotations"] = {DOMAIN_ANNOTATION: f"{domain_namespace}/{domain_name}"}
    return meta


def channel_scope(domain: ComputeDomain) -> ChannelScope:
    """The domain's channel scope from its ``computedomain.gpudra.dev/channel-scope`` annotation (default Pod)."""
    value = (domain.metadata.annotations or {}).get(CHANNEL_SCOPE_ANNOTATION, "Pod")
    for scope in CHANNEL_SCOPES:
        if value == scope:
            return scope
    raise InvalidInputError(
        f"metadata.annotations[{CHANNEL_SCOPE_ANNOTATION}]: Unsupported value: {value!r}: supported values: "
        + ", ".join(f'"{s}"' for s in CHANNEL_SCOPES)
    )


def _claim_template(
    metadata: dict[str, Any],
    request: str,
    device_class: str,
    driver: str,
    parameters: dict[str, Any],
    selector: str | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": metadata,
        "spec": {
            # claims made from the template name their domain, but not the managed-by label: the
            # children selector must never match a pod's claim
            "metadata": {"labels": {OBJECT_LABEL: metadata["labels"][OBJECT_LABEL]}},
            "spec": {
                "devices": {
                    "requests": [{"name": request, "exactly": _exactly(device_class, selector)}],
                    "config": [
                        {"requests": [request], "opaque": {"driver": driver, "parameters": parameters}}
                    ],
                }
            },
        },
    }


def _exactly(device_class: str, selector: str | None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if selector is not None:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return exactly


def workload_template(domain: ComputeDomain, drivers: DriverNames) -> dict[str, Any]:
    """The ResourceClaimTemplate the domain's workload pods claim (named in spec.channel): a channel of the
    pod's node, or (PodGroup scope) the domain's own channel on every node."""
    uid, _, namespace = _identity(domain)
    channel = domain.spec.channel
    config = ComputeDomainChannelConfig(domain_id=uid, allocation_mode=channel.allocation_mode)
    metadata = _metadata(domain, channel.resource_claim_template.name, namespace, "workload-channel")
    if channel_scope(domain) == "PodGroup":
        selector = f"device.attributes[{drivers.compute_domain!r}].domainID == {uid!r}"
        return _claim_template(
            metadata,
            CHANNEL_REQUEST,
            SHARED_CHANNEL_CLASS,
            drivers.compute_domain,
            config.to_wire(),
            selector,
        )
    return _claim_template(
        metadata, CHANNEL_REQUEST, DEFAULT_CHANNEL_CLASS, drivers.compute_domain, config.to_wire()
    )


def shared_channel_slice(domain: ComputeDomain, drivers: DriverNames) -> dict[str, Any]:
    """The ResourceSlice of a PodGroup-scoped domain: its one channel, allocatable on every node in an NVLink
    clique (a cluster-scoped object carries no owner reference to a namespaced domain: the label and
    annotation name it, and the controller deletes it with the domain)."""
    uid, name, namespace = _identity(domain)
    pool = shared_pool_name(uid)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": pool,
            "labels": {OBJECT_LABEL: uid, COMPONENT_LABEL: "workload-channel", MANAGED_BY_LABEL: MANAGED_BY},
            "annotations": {DOMAIN_ANNOTATION: f"{namespace}/{name}"},
        },
        "spec": {
            "driver": drivers.compute_domain,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": CLIQUE_LABEL, "operator": "Exists"}]}]
            },
            "devices": [
                {
                    "name": CHANNEL_DEVICE,
                    "attributes": {
                        "type": {"string": SHARED_CHANNEL_TYPE},
                        "id": {"int": 0},
                        "domainID": {"string": uid},
                    },
                }
            ],
        },
    }


def daemon_template(domain: ComputeDomain, drivers: DriverNames, driver_namespace: str) -> dict[str, Any]:
    """The ResourceClaimTemplate each daemon pod of the domain claims."""
    uid, _, _ = _identity(domain)
    config = ComputeDomainDaemonConfig(domain_id=uid)
    metadata = _metadata(domain, daemon_template_name(uid), driver_namespace, "daemon-claim")
    return _claim_template(metadata, DAEMON_REQUEST, DAEMON_CLASS, drivers.compute_domain, config.to_wire())


def _env(uid: str, name: str, namespace: str) -> list[dict[str, Any]]:
    def field(path: str) -> dict[str, Any]:
        return {"valueFrom": {"fieldRef": {"fieldPath": path}}}

    return [
        {"name": "COMPUTE_DOMAIN_UUID", "value": uid},
        {"name": "COMPUTE_DOMAIN_NAME", "value": name},
        {"name": "COMPUTE_DOMAIN_NAMESPACE", "value": namespace},
        {"name": "NODE_NAME", **field("spec.nodeName")},
        {"name": "POD_IP", **field("status.podIP")},
        {"name": "POD_NAME", **field("metadata.name")},
        {"name": "POD_NAMESPACE", **field("metadata.namespace")},
    ]


def daemon_set(
    domain: ComputeDomain,
    driver_namespace: str,
    daemon_image: str,
    pods: DaemonPodSettings = DaemonPodSettings(),
) -> dict[str, Any]:
    """The per-domain DaemonSet running the domain's IMEX daemon on every node labelled for it."""
    uid, name, namespace = _identity(domain)
    if not daemon_image:
        raise InvalidInputError("the ComputeDomain daemon image is empty; set the daemon image setting")
    metadata = _metadata(domain, daemon_set_name(uid), driver_namespace, "daemon")
    selector = {OBJECT_LABEL: uid, COMPONENT_LABEL: "daemon"}
    resources = {"cpu": pods.cpu, "memory": pods.memory}
    pod_security, container_security = restricted_security()
    pod_spec: dict[str, Any] = {
        "nodeSelector": {node_label_key(uid): NODE_LABEL_VALUE},
        "securityContext": pod_security,
        "containers": [
            {
                "name": DAEMON_CONTAINER,
                "image": daemon_image,
                "args": ["imex-daemon"],
                "env": _env(uid, name, namespace) + [{"name": k, "value": v} for k, v in pods.env],
                "resources": {
                    "requests": dict(resources),
                    "limits": dict(resources),
                    "claims": [{"name": DAEMON_CLAIM}],
                },
                "securityContext": container_security,
            }
        ],
        "resourceClaims": [{"name": DAEMON_CLAIM, "resourceClaimTemplateName": daemon_template_name(uid)}],
    }
    if pods.tolerate_all_taints:
        pod_spec["tolerations"] = [{"operator": "Exists"}]
    if pods.priority_class:
        pod_spec["priorityClassName"] = pods.priority_class
    if pods.service_account:
        pod_spec["serviceAccountName"] = pods.service_account
    if pods.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in pods.image_pull_secrets]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": metadata,
        "spec": {
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": dict(metadata["labels"])}, "spec": pod_spec},
        },
    }


def desired_children(
    domain: ComputeDomain,
    *,
    drivers: DriverNames,
    driver_namespace: str,
    daemon_image: str,
    mode: DaemonMode,
    pods: DaemonPodSettings = DaemonPodSettings(),
) -> Children:
    """Everything the controller should apply for ``domain`` (and nothing else for it should exist)."""
    if mode not in DAEMON_MODES:
        raise InvalidInputError(f"daemon mode {mode!r} is not one of {list(DAEMON_MODES)}")
    if not driver_namespace:
        raise InvalidInputError("the driver namespace is empty")
    uid, _, _ = _identity(domain)
    return Children(
        workload_template=workload_template(domain, drivers),
        daemon_template=daemon_template(domain, drivers, driver_namespace),
        daemon_set=daemon_set(domain, driver_namespace, daemon_image, pods) if mode == "daemonset" else None,
        shared_channel=shared_channel_slice(domain, drivers) if channel_scope(domain) == "PodGroup" else None,
        node_label=(node_label_key(uid), NODE_LABEL_VALUE),
    )


def child_selector(domain_uid: str) -> dict[str, str]:
    """Label selector (matchLabels) of every child of a domain, in any namespace."""
    return {OBJECT_LABEL: domain_uid, MANAGED_BY_LABEL: MANAGED_BY}
