"""What the passthrough tests in the embedded cluster share (their one-node L4 cluster with passthrough on is the
``passthrough_cluster`` fixture): the node's published devices, and a claim with a pod for one device of a class."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpudra.kube.client import KubeClient
from gpudra.kube.resources import PODS, RESOURCE_CLAIMS, RESOURCE_SLICES

NODE = "l4x4-0"
NS = "vms"
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"


async def published(client: KubeClient) -> dict[str, dict[str, Any]]:
    """Device name -> device, over the node's slices."""
    slices, _ = await client.list_raw(RESOURCE_SLICES)
    return {
        d["name"]: d
        for s in slices
        if s["spec"].get("nodeName") == NODE
        for d in s["spec"].get("devices") or []
    }


def bus_of(device: dict[str, Any]) -> str:
    return str(device["attributes"][PCI_BUS_ID]["string"])


async def published_when(
    client: KubeClient, test: Callable[[dict[str, dict[str, Any]]], bool]
) -> dict[str, dict[str, Any]] | None:
    devices = await published(client)
    return devices if test(devices) else None


async def claim_and_pod(client: KubeClient, name: str, device_class: str, bus: str | None = None) -> str:
    """A claim for one device of ``device_class`` (on the GPU at ``bus``) and a pod using it; the claim's UID."""
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if bus is not None:
        exactly["selectors"] = [{"cel": {"expression": f'device.attributes["{PCI_BUS_ID.split("/")[0]}"]'
                                                       f'.pciBusID == "{bus}"'}}]  # fmt: skip
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }
    claim = await client.create(RESOURCE_CLAIMS, body, NS)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "containers": [
                {"name": "main", "image": "virt-launcher", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
        },
    }
    await client.create(PODS, pod, NS)
    return str(claim["metadata"]["uid"])


async def running(client: KubeClient, name: str) -> bool:
    pod = await client.get_raw(PODS, name, NS)
    return bool(pod.get("status", {}).get("phase") == "Running")
