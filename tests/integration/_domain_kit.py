"""Helpers of the ComputeDomain controller tests: domains, what the scheduler and the IMEX daemons would
write (allocated channel claims, ComputeDomainClique reports), and node labels the agent would set."""

from __future__ import annotations

from typing import Any

from clusterkit import eventually
from gpudra.computedomain.names import NODE_CLIQUE_LABEL, OBJECT_LABEL, clique_object_name
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import (
    COMPUTE_DOMAIN_CLIQUES,
    COMPUTE_DOMAINS,
    EVENTS,
    NODES,
    RESOURCE_CLAIMS,
)

NS = "default"
DRIVER_NS = "gpudra"


def domain(name: str, *, mode: str = "Single", num_nodes: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "numNodes": num_nodes,
            "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}, "allocationMode": mode},
        },
    }


async def create_domain(client: KubeClient, name: str, **kwargs: Any) -> str:
    created = await client.create(COMPUTE_DOMAINS, domain(name, **kwargs), NS)
    return str(created["metadata"]["uid"])


async def allocate_channel(client: KubeClient, uid: str, node: str, pod: str) -> None:
    """A workload channel claim of domain ``uid`` allocated on ``node`` and reserved for ``pod``, as the
    scheduler leaves it."""
    request = {"name": "channel", "exactly": {"deviceClassName": "compute-domain-default-channel.nvidia.com"}}
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"{pod}-channel", "namespace": NS, "labels": {OBJECT_LABEL: uid}},
        "spec": {"devices": {"requests": [request]}},
    }
    claim = await client.create(RESOURCE_CLAIMS, body, NS)
    allocation = {
        "devices": {"results": [{"request": "channel", "driver": "compute-domain.nvidia.com", "pool": node,
                                 "device": "channel-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
    }  # fmt: skip
    reserved = [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}]
    await client.patch(
        RESOURCE_CLAIMS,
        claim["metadata"]["name"],
        {"status": {"allocation": allocation, "reservedFor": reserved}},
        NS,
        subresource="status",
    )


async def label_clique(client: KubeClient, node: str, clique: str | None) -> None:
    await client.patch(NODES, node, {"metadata": {"labels": {NODE_CLIQUE_LABEL: clique}}})


async def report_daemons(client: KubeClient, uid: str, clique: str, daemons: list[tuple[str, str]]) -> None:
    """Write the clique object of domain ``uid`` with (node, status) daemons, indices in order."""
    body = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainClique",
        "metadata": {"name": clique_object_name(uid, clique), "namespace": DRIVER_NS},
        "daemons": [
            {"nodeName": node, "ipAddress": f"10.0.0.{i}", "cliqueID": clique, "index": i, "status": status}
            for i, (node, status) in enumerate(daemons)
        ],
    }
    await client.patch(
        COMPUTE_DOMAIN_CLIQUES, body["metadata"]["name"], body, DRIVER_NS, patch_type="apply", force=True
    )


async def domain_status(client: KubeClient, name: str) -> dict[str, Any]:
    body = await client.get(COMPUTE_DOMAINS, name, NS)
    return dict(body.get("status") or {})


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


async def wait_status(client: KubeClient, name: str, state: str, reason: str | None = None) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        status = await domain_status(client, name)
        if status.get("status") != state:
            return None
        if reason is not None and condition(status, "Ready").get("reason") != reason:
            return None
        return status

    result: dict[str, Any] = await eventually(check, timeout=30)
    return result


async def domain_events(client: KubeClient, name: str) -> list[dict[str, Any]]:
    events, _ = await client.list(EVENTS, NS, field_selector=f"involvedObject.name={name}")
    return [e for e in events if e["source"]["component"] == "gpudra-controller"]
