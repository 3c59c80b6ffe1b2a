"""What the agent and prepare benchmarks share: a node's claims written as the scheduler leaves them (allocated
through the status subresource), and latency percentiles."""

from __future__ import annotations

import math
from typing import Any

from gpudra.agent.kubeletplugin import ClaimRef
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import NAMESPACES, NODES, RESOURCE_CLAIMS

DRIVER = "gpu.nvidia.com"
NAMESPACE = "bench"
GPU_CONFIG = "resource.nvidia.com/v1beta1"


async def make_node(client: KubeClient, node: str) -> None:
    await client.apply_object(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    )
    await client.apply_object(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})


async def allocated_claim(
    client: KubeClient,
    name: str,
    node: str,
    device: str,
    *,
    device_class: str = DRIVER,
    sharing: dict[str, Any] | None = None,
    config_kind: str = "GpuConfig",
) -> ClaimRef:
    """A claim of one device, allocated to it on ``node`` (and reserved for a pod), with an opaque sharing config."""
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": device_class}}]}},
    }
    created = await client.create(RESOURCE_CLAIMS, body, NAMESPACE)
    config = []
    if sharing is not None:
        parameters = {"apiVersion": GPU_CONFIG, "kind": config_kind, "sharing": sharing}
        config = [{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": parameters}}]
    created["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "r", "driver": DRIVER, "pool": node, "device": device}],
                "config": config,
            }
        },
        "reservedFor": [{"resource": "pods", "name": f"{name}-pod", "uid": f"pod-{name}"}],
    }
    created = await client.replace(RESOURCE_CLAIMS, created, subresource="status")
    return ClaimRef(namespace=NAMESPACE, uid=created["metadata"]["uid"], name=name)


def percentile(samples: list[float], fraction: float) -> float:
    """The nearest-rank percentile (p99 of 100 samples is the 99th smallest)."""
    ordered = sorted(samples)
    rank = min(max(1, math.ceil(fraction * len(ordered) - 1e-9)), len(ordered))
    return ordered[rank - 1]
