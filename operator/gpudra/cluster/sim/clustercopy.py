"""``gpudra up --from-cluster KUBECONFIG``: a simulated copy of a real cluster's GPU fleet, to ask "what if" on.

It reads, through :class:`~gpudra.cluster.sim.readonly.ReadOnlyKube` only, the real cluster's GPU ResourceSlices
(gpudra's or NVIDIA's driver's), Nodes and DeviceClasses, and with ``--with-claims`` its pending and allocated
ResourceClaims with their pods. Each GPU node becomes a simulated node with the same name, labels, taints, GPUs,
UUIDs and MIG instances; the DeviceClasses are applied over gpudra's; the claims and pods are created in the copy
once it runs, allocated claims with their allocation and their pods bound to the same nodes (so the agents prepare
them, and MIG changes that would touch them are Blocked as on the real cluster), pending pods left for the copy's
scheduler.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpudra.cluster.sim.fleetfile import FleetNode
from gpudra.cluster.sim.podadmission import admissible, priority_classes, service_accounts
from gpudra.cluster.sim.readonly import ReadOnlyKube
from gpudra.cluster.sim.slicecopy import machine_of_devices
from gpudra.errors import ConfigurationError, NotFoundError
from gpudra.hardware.gpus.catalog import Catalog, load_catalog
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import (
    DEVICE_CLASSES,
    NAMESPACES,
    NODES,
    PODS,
    PRIORITY_CLASSES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    SERVICE_ACCOUNTS,
)
from gpudra.reports import PROFILE_LABEL

COPIED_PROFILE = "copied"
_SERVER_META = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "ownerReferences",
                "deletionTimestamp", "deletionGracePeriodSeconds", "finalizers", "selfLink")  # fmt: skip


@dataclass
class ClusterCopy:
    """What ``gpudra up`` builds from the real cluster: the nodes, and the objects to create once it runs."""

    source: str
    nodes: list[FleetNode]
    device_classes: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        gpus = sum(len(n.hardware().gpus) for n in self.nodes)
        text = (
            f"copied {len(self.nodes)} GPU nodes ({gpus} GPUs) and {len(self.device_classes)} DeviceClasses"
        )
        if self.claims or self.pods:
            allocated = sum(1 for c in self.claims if (c.get("status") or {}).get("allocation"))
            text += f", {len(self.claims)} ResourceClaims ({allocated} allocated) and {len(self.pods)} pods"
        return text + f" from {self.source}"


async def read_cluster(
    kubeconfig: Path, *, with_claims: bool, driver: str = "gpu.nvidia.com", catalog: Catalog | None = None
) -> ClusterCopy:
    """Read the real cluster (get and list only) and build its copy."""
    client = ReadOnlyKube(await KubeClient.from_environment(kubeconfig, field_manager="gpudra-copy"))
    try:
        return await copy_of(client, str(kubeconfig), with_claims=with_claims, driver=driver, catalog=catalog)
    finally:
        await client.close()


async def copy_of(
    client: ReadOnlyKube, source: str, *, with_claims: bool, driver: str, catalog: Catalog | None = None
) -> ClusterCopy:
    models = catalog or load_catalog()
    slices = [
        s for s in await client.list_raw(RESOURCE_SLICES) if (s.get("spec") or {}).get("driver") == driver
    ]
    nodes = {n["metadata"]["name"]: n for n in await client.list_raw(NODES)}
    by_node: dict[str, list[dict[str, Any]]] = {}
    for item in slices:
        name = (item.get("spec") or {}).get("nodeName")
        if name:
            by_node.setdefault(name, []).extend((item.get("spec") or {}).get("devices") or [])
    copy = ClusterCopy(source=source, nodes=[])
    for index, (name, devices) in enumerate(sorted(by_node.items())):
        node = nodes.get(name) or {"metadata": {"name": name}}
        labels = dict(node["metadata"].get("labels") or {})
        machine, notes = machine_of_devices(name, devices, labels, driver, models)
        copy.notes += notes
        taints = tuple(
            t
            for t in (node.get("spec") or {}).get("taints") or []
            if not str(t.get("key")).startswith("node.kubernetes.io/")
        )
        profile = labels.pop(PROFILE_LABEL, COPIED_PROFILE)
        copy.nodes.append(FleetNode(name, profile, index, labels, taints, machine))
    if not copy.nodes:
        raise ConfigurationError(
            f"{source}: the cluster publishes no ResourceSlice of driver {driver} with GPUs"
        )
    copy.device_classes = [_bare(c) for c in await client.list_raw(DEVICE_CLASSES)]
    if with_claims:
        await _claims(client, copy, driver)
    return copy


def _bare(body: Mapping[str, Any], *, status: bool = False) -> dict[str, Any]:
    """The object as one would write it: without server-set metadata (and without status unless asked)."""
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k not in _SERVER_META}
    out = {k: v for k, v in body.items() if k not in ("metadata", "status")}
    out["metadata"] = meta
    if status and body.get("status"):
        out["status"] = body["status"]
    return out


async def _claims(client: ReadOnlyKube, copy: ClusterCopy, driver: str) -> None:
    copied_nodes = {n.name for n in copy.nodes}
    pods = {
        (p["metadata"].get("namespace", ""), p["metadata"]["name"]): p for p in await client.list_raw(PODS)
    }
    for claim in await client.list_raw(RESOURCE_CLAIMS):
        meta = claim["metadata"]
        key = f"{meta.get('namespace')}/{meta['name']}"
        allocation = (claim.get("status") or {}).get("allocation")
        results = ((allocation or {}).get("devices") or {}).get("results") or []
        if any(r.get("driver") != driver or r.get("pool") not in copied_nodes for r in results):
            copy.notes.append(f"claim {key}: allocated from devices the copy does not have; left out")
            continue
        copy.claims.append(_bare(claim, status=bool(allocation)))
        for pod in _consumers(claim, pods):
            if pod not in copy.pods:
                copy.pods.append(pod)
    copy.pods = [_pod(p, copied_nodes) for p in copy.pods]


def _consumers(
    claim: Mapping[str, Any], pods: Mapping[tuple[str, str], dict[str, Any]]
) -> list[dict[str, Any]]:
    """The pods of a claim: its reservedFor, or (pending) the pods that name it."""
    namespace, name = claim["metadata"].get("namespace", ""), claim["metadata"]["name"]
    reserved = [
        r["name"] for r in (claim.get("status") or {}).get("reservedFor") or [] if r.get("resource") == "pods"
    ]
    found = [pods[(namespace, p)] for p in reserved if (namespace, p) in pods]
    for (pod_namespace, _), pod in pods.items():
        if pod_namespace == namespace and name in _claim_names(pod).values() and pod not in found:
            found.append(pod)
    return found


def _claim_names(pod: Mapping[str, Any]) -> dict[str, str]:
    """Pod claim entry name -> ResourceClaim name (templates resolved through the pod's status)."""
    generated = {
        s["name"]: s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    names = {}
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        claim = entry.get("resourceClaimName") or generated.get(entry["name"])
        if claim:
            names[entry["name"]] = str(claim)
    return names


def _pod(pod: Mapping[str, Any], nodes: set[str]) -> dict[str, Any]:
    """The pod as the copy creates it: its claims named directly (the copy holds the claims made from templates),
    bound to its node when that node is copied."""
    body = _bare(pod)
    spec = dict(body.get("spec") or {})
    names = _claim_names(pod)
    spec["resourceClaims"] = [{"name": n, "resourceClaimName": c} for n, c in names.items()]
    if spec.get("nodeName") not in nodes:
        spec.pop("nodeName", None)
    body["spec"] = spec
    return body


def seeder(copy: ClusterCopy) -> Callable[[KubeClient], Awaitable[None]]:
    """What ``gpudra up`` calls once the copy runs."""

    async def seed_copy(client: KubeClient) -> None:
        await seed(client, copy)

    return seed_copy


async def seed(client: KubeClient, copy: ClusterCopy) -> None:
    """Create the copied objects in the running copy: DeviceClasses, namespaces, the ServiceAccounts and
    PriorityClasses the pods name, claims, pods; then the allocations of allocated claims, reserved for the copied
    pods (pods bound to a node wait for it, as on a real node)."""
    for device_class in copy.device_classes:
        await client.apply_object(DEVICE_CLASSES, device_class)
    namespaces = sorted({o["metadata"].get("namespace", "default") for o in [*copy.claims, *copy.pods]})
    for namespace in namespaces:
        await client.apply_object(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
    for account in service_accounts(copy.pods):
        await client.apply_object(SERVICE_ACCOUNTS, account)
    for priority_class in priority_classes(copy.pods):
        await client.apply_object(PRIORITY_CLASSES, priority_class)
    for claim in copy.claims:
        await client.create(RESOURCE_CLAIMS, _bare(claim), claim["metadata"].get("namespace"))
    bound = [p for p in copy.pods if p["spec"].get("nodeName")]
    created = {}
    for pod in bound:
        body = await client.create(PODS, admissible(pod), pod["metadata"].get("namespace"))
        created[(body["metadata"]["namespace"], body["metadata"]["name"])] = body
    for claim in copy.claims:
        await _reserve(client, claim, created)
    for pod in copy.pods:
        if not pod["spec"].get("nodeName"):
            await client.create(PODS, admissible(pod), pod["metadata"].get("namespace"))


async def _reserve(
    client: KubeClient, claim: Mapping[str, Any], pods: Mapping[tuple[str, str], dict[str, Any]]
) -> None:
    status = claim.get("status") or {}
    if not status.get("allocation"):
        return
    namespace, name = claim["metadata"].get("namespace", "default"), claim["metadata"]["name"]
    reserved = [
        {"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}
        for (pod_namespace, _), p in pods.items()
        if pod_namespace == namespace and name in _claim_names(p).values()
    ]
    try:
        await client.patch(
            RESOURCE_CLAIMS, name, {"status": {"allocation": status["allocation"], "reservedFor": reserved}},
            namespace, subresource="status",
        )  # fmt: skip
    except NotFoundError:
        return
