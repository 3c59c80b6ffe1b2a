"""What the list-attribute tests share on both control planes: a node of four A30 cards bridged in pairs by
NVLink, the agent publishing gpudra.dev/nvlinkPeers where the API server keeps list attributes, and the two
scenarios a user meets: the gate on (claims stay within an NVLink island; on Kubernetes 1.36 through includes()
only, matchAttribute on a list allocating nothing) and off (scalars only, the Node says why, includes() refused in
a new claim)."""

from __future__ import annotations

import json
from typing import Any

from clusterkit import StartCluster, eventually, kubectl
from gpudra.cluster.sim.fleetfile import FleetNode
from gpudra.cluster.up import EmbeddedCluster
from gpudra.hardware.gpus.catalog import load_catalog
from gpudra.hardware.simulated.machine import machine_of_profile
from gpudra.hardware.simulated.profiles import NODE_PROFILES, ProfileEntry, resolve_entry
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import EVENTS, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES

GATE = "DRAListTypeAttributes"
NODE = "a30-0"
PEERS = "gpudra.dev/nvlinkPeers"


def bridged_a30_node() -> FleetNode:
    """Four A30 PCIe cards joined in pairs by NVLink bridges: GPUs 0-1 and 2-3."""
    entry = ProfileEntry.model_validate({"name": "a30-bridged", "base": "a30x4", "nvlink": "bridged-pairs"})
    profile = resolve_entry(entry, NODE_PROFILES, load_catalog())
    return FleetNode(name=NODE, profile="a30x4", fleet_index=0, machine=machine_of_profile(profile, NODE))


async def start(start_cluster: StartCluster, *gates: str, **options: Any) -> EmbeddedCluster:
    cluster = await start_cluster(
        [bridged_a30_node()],
        hardware_poll_seconds=0.1,
        agent_settings={"list_attributes": True},
        feature_gates_on=gates,
        **options,
    )
    assert cluster.client is not None
    return cluster


async def gpus(client: KubeClient) -> dict[str, dict[str, Any]]:
    slices, _ = await client.list_raw(RESOURCE_SLICES)
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
    claim = await client.get_raw(RESOURCE_CLAIMS, name, "default")
    results = (claim.get("status", {}).get("allocation") or {}).get("devices", {}).get("results") or []
    return {r["device"] for r in results} or None


async def gate_on_scenario(cluster: EmbeddedCluster) -> None:
    """With the gate on: each GPU carries its NVLink island; includes() and matchAttribute keep claims in one."""
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
    _, minor = await client.server_version()
    if minor >= 37:
        got = await eventually(
            lambda: allocated(client, "pair"), 30.0, what="the matchAttribute claim allocated"
        )
        assert got == {"gpu-2", "gpu-3"}
        return

    # kube-scheduler 1.36 gives DRAListTypeAttributes to CEL but not to its allocator (kubernetes#139332, fixed in
    # 1.37), whose scalar-only constraints match a list with no other device: the pair stays pending, and the
    # controller says why on the pod
    said = await eventually(
        lambda: controller_says(client, "pair"), 30.0, what="the controller's word on pair"
    )
    assert "Kubernetes 1.36 compares a list attribute with no other device's value" in said
    assert await allocated(client, "pair") is None

    # includes() keeps a claim in the island on 1.36 too
    selector = f'device.attributes["gpudra.dev"].nvlinkPeers.includes("{uuids["gpu-2"]}")'
    await claim_with_pod(client, "island", {"count": 2, "selectors": [{"cel": {"expression": selector}}]})
    got = await eventually(
        lambda: allocated(client, "island"), 30.0, what="the second includes() claim allocated"
    )
    assert got == {"gpu-2", "gpu-3"}


async def controller_says(client: KubeClient, pod: str) -> str | None:
    """The message of the gpudra controller's Warning on a waiting pod (its explanation), if any yet."""
    events, _ = await client.list_raw(EVENTS, "default", field_selector=f"involvedObject.name={pod}")
    said = [e["message"] for e in events if e.get("reportingComponent") == "gpudra-controller"]
    return said[-1] if said else None


async def gate_off_scenario(cluster: EmbeddedCluster) -> None:
    """With the gate off: scalars only, a ListAttributesOff Event on the Node, includes() refused in a new claim."""
    client = cluster.client
    assert client is not None

    async def warned() -> str | None:
        events, _ = await client.list_raw(EVENTS, field_selector=f"involvedObject.name={NODE}")
        return next((e["message"] for e in events if e["reason"] == "ListAttributesOff"), None)

    message = await eventually(warned, 30.0, what="a ListAttributesOff Event on the Node")
    assert "DRAListTypeAttributes" in message and "scalar attributes only" in message
    assert "spec.devices[0].attributes[gpudra.dev/nvlinkPeers]" in message  # what the server refused

    async def four() -> dict[str, dict[str, Any]] | None:
        devices = await gpus(client)
        return devices if len(devices) == 4 else None

    devices = await eventually(four, 30.0, what="four GPUs published")
    assert all(PEERS not in d["attributes"] and "uuid" in d["attributes"] for d in devices.values())

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
