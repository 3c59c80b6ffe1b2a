"""List-typed attributes in the embedded cluster (``list_attributes``): with the API server's DRAListTypeAttributes
gate on, each full GPU carries gpudra.dev/nvlinkPeers and claims can keep their GPUs within one NVLink island; with
it off, the agent finds out with a dry-run write, publishes scalar attributes only and says why on the Node, and a
new claim using includes() is refused as kube-apiserver refuses it."""

from __future__ import annotations

import json
from typing import Any

from clusterkit import StartCluster, eventually, kubectl
from gpudra.cluster.sim.fleetfile import FleetNode
from gpudra.cluster.up import EmbeddedCluster
from gpudra.hardware.catalog import load_catalog
from gpudra.hardware.profiles import NODE_PROFILES, ProfileEntry, resolve_entry
from gpudra.hardware.simulated.machine import machine_of_profile
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import EVENTS, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES

NODE = "a30-0"
PEERS = "gpudra.dev/nvlinkPeers"


def bridged_a30_node() -> FleetNode:
    """Four A30 PCIe cards joined in pairs by NVLink bridges: GPUs 0-1 and 2-3."""
    entry = ProfileEntry.model_validate({"name": "a30-bridged", "base": "a30x4", "nvlink": "bridged-pairs"})
    profile = resolve_entry(entry, NODE_PROFILES, load_catalog())
    return FleetNode(name=NODE, profile="a30x4", fleet_index=0, machine=machine_of_profile(profile, NODE))


async def start(start_cluster: StartCluster, *gates: str) -> EmbeddedCluster:
    cluster = await start_cluster(
        [bridged_a30_node()],
        hardware_poll_seconds=0.1,
        agent_settings={"list_attributes": True},
        feature_gates_on=gates,
    )
    assert cluster.client is not None
    return cluster


async def gpus(client: KubeClient) -> dict[str, dict[str, Any]]:
    slices, _ = await client.list(RESOURCE_SLICES)
    return {
        d["name"]: d for s in slices for d in s["spec"].get("devices") or [] if d["name"].startswith("gpu-")
    }


def uuid_of(device: dict[str, Any]) -> str:
    return str(device["attributes"]["uuid"]["string"])


async def claim_with_pod(client: KubeClient, name: str, exactly: dict[str, Any], **spec: Any) -> None:
    request = {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", **exactly}}
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [request], **spec}},
    }
    await client.create(RESOURCE_CLAIMS, claim, "default")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "main", "image": "cuda", "resources": {"claims": [{"name": "gpus"}]}}],
            "resourceClaims": [{"name": "gpus", "resourceClaimName": name}],
        },
    }
    await client.create(PODS, pod, "default")


async def allocated(client: KubeClient, name: str) -> set[str] | None:
    claim = await client.get(RESOURCE_CLAIMS, name, "default")
    results = (claim.get("status", {}).get("allocation") or {}).get("devices", {}).get("results") or []
    return {r["device"] for r in results} or None


async def test_with_the_gate_on_claims_stay_within_an_nvlink_island(start_cluster: StartCluster) -> None:
    cluster = await start(start_cluster, "DRAListTypeAttributes")
    client = cluster.client
    assert client is not None

    async def with_peers() -> dict[str, dict[str, Any]] | None:
        devices = await gpus(client)
        return (
            devices if len(devices) == 4 and all(PEERS in d["attributes"] for d in devices.values()) else None
        )

    devices = await eventually(with_peers, 30.0, what="four GPUs published with their NVLink peers")
    uuids = {name: uuid_of(d) for name, d in devices.items()}
    assert devices["gpu-1"]["attributes"][PEERS]["strings"] == sorted([uuids["gpu-0"], uuids["gpu-1"]])
    assert devices["gpu-2"]["attributes"][PEERS]["strings"] == sorted([uuids["gpu-2"], uuids["gpu-3"]])

    # includes(): the GPUs linked to gpu-0
    selector = f'device.attributes["gpudra.dev"].nvlinkPeers.includes("{uuids["gpu-0"]}")'
    await claim_with_pod(client, "linked", {"count": 2, "selectors": [{"cel": {"expression": selector}}]})
    got = await eventually(lambda: allocated(client, "linked"), 30.0, what="the includes() claim allocated")
    assert got == {"gpu-0", "gpu-1"}

    # matchAttribute on the list: two free GPUs sharing a peer; gpu-0 and gpu-1 are taken, so the other pair
    await claim_with_pod(
        client, "pair", {"count": 2}, constraints=[{"requests": ["gpus"], "matchAttribute": PEERS}]
    )
    got = await eventually(lambda: allocated(client, "pair"), 30.0, what="the matchAttribute claim allocated")
    assert got == {"gpu-2", "gpu-3"}


async def test_with_the_gate_off_only_scalars_are_published_and_the_node_says_why(
    start_cluster: StartCluster,
) -> None:
    cluster = await start(start_cluster)
    client = cluster.client
    assert client is not None

    async def warned() -> str | None:
        events, _ = await client.list(EVENTS, field_selector=f"involvedObject.name={NODE}")
        return next((e["message"] for e in events if e["reason"] == "ListAttributesOff"), None)

    message = await eventually(warned, 30.0, what="a ListAttributesOff Event on the Node")
    assert "DRAListTypeAttributes" in message and "scalar attributes only" in message
    assert "exactly one value must be specified" in message

    async def four() -> dict[str, dict[str, Any]] | None:
        devices = await gpus(client)
        return devices if len(devices) == 4 else None

    devices = await eventually(four, 30.0, what="four GPUs published")
    assert all(PEERS not in d["attributes"] and "uuid" in d["attributes"] for d in devices.values())
    support = cluster.agents[NODE].lists.support
    assert support is not None and support.settled and not support.kept

    # kubectl apply of a claim selecting with includes(): the API server's CEL environment for new expressions
    # lacks it with the gate off
    linked = f'device.attributes["gpudra.dev"].nvlinkPeers.includes("{uuid_of(devices["gpu-0"])}")'
    request = {"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {"expression": linked}}]}
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "linked", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": request}]}},
    }
    out = await kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(claim), check=False)
    assert 'The ResourceClaim "linked" is invalid' in out
    assert "spec.devices.requests[0].exactly.selectors[0].cel.expression: Invalid value" in out
    assert "undeclared reference to 'includes'" in out
    assert "linked" not in await kubectl(cluster, "get", "resourceclaims", "-n", "default", "-o", "name")
