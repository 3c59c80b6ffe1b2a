"""Helpers of the ComputeDomain controller tests: domains and workload pods as a user writes them, and
reading back what the controller reports on the domain."""

from __future__ import annotations

from typing import Any

from clusterkit import eventually
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import COMPUTE_DOMAINS, EVENTS, PODS

NS = "default"
DRIVER_NS = "gpudra"


def domain(
    name: str, *, mode: str = "Single", num_nodes: int = 0, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": NS, **({"annotations": annotations} if annotations else {})},
        "spec": {
            "numNodes": num_nodes,
            "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}, "allocationMode": mode},
        },
    }


async def create_domain(client: KubeClient, name: str, **kwargs: Any) -> str:
    created = await client.create(COMPUTE_DOMAINS, domain(name, **kwargs), NS)
    return str(created["metadata"]["uid"])


def workload_pod(name: str, domain_name: str, node: str) -> dict[str, Any]:
    """A pod of the domain pinned to ``node``, claiming the domain's channel template."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "main", "image": "cuda", "resources": {"claims": [{"name": "channel"}]}}],
            "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": f"{domain_name}-channel"}],
        },
    }


async def run_pods(client: KubeClient, domain_name: str, nodes: list[str]) -> list[str]:
    """One workload pod of the domain per node; the pod names."""
    names = [f"{domain_name}-{i}" for i in range(len(nodes))]
    for name, node in zip(names, nodes, strict=True):
        await client.create(PODS, workload_pod(name, domain_name, node), NS)
    return names


async def all_running(client: KubeClient, names: list[str]) -> bool:
    for name in names:
        pod = await client.get_raw(PODS, name, NS)
        if (pod.get("status") or {}).get("phase") != "Running":
            return False
    return True


async def domain_status(client: KubeClient, name: str) -> dict[str, Any]:
    body = await client.get_raw(COMPUTE_DOMAINS, name, NS)
    return dict(body.get("status") or {})


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


async def wait_status(
    client: KubeClient, name: str, state: str, reason: str | None = None, *, nodes: int | None = None
) -> dict[str, Any]:
    """The domain's status once it says ``state`` (with the Ready condition's ``reason``, over ``nodes``)."""

    async def check() -> dict[str, Any] | None:
        status = await domain_status(client, name)
        if status.get("status") != state:
            return None
        if reason is not None and condition(status, "Ready").get("reason") != reason:
            return None
        if nodes is not None and len(status.get("nodes") or []) != nodes:
            return None
        return status

    result: dict[str, Any] = await eventually(check, timeout=30)
    return result


async def domain_events(client: KubeClient, name: str) -> list[dict[str, Any]]:
    events, _ = await client.list_raw(EVENTS, NS, field_selector=f"involvedObject.name={name}")
    return [e for e in events if e["source"]["component"] == "gpudra-controller"]


async def has_event(client: KubeClient, name: str, reason: str, *words: str) -> bool:
    return any(
        e["reason"] == reason and all(w in e["message"] for w in words)
        for e in await domain_events(client, name)
    )
