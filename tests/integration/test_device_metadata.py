"""Device metadata (KEP-5304) on the embedded cluster: with GPUDRA_DEVICE_METADATA on, a prepared claim's CDI spec
bind-mounts a metadata.resource.k8s.io/v1alpha1 file naming the allocated GPU's UUID and PCI bus id, the pod's
container is given that mount, and unprepare removes the file."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from clusterkit import StartCluster, client_of, eventually
from gpudra.kube.resources import PODS, RESOURCE_CLAIMS


async def test_a_prepared_claim_mounts_its_device_metadata_until_unprepared(
    start_cluster: StartCluster,
) -> None:
    cluster = await start_cluster("dgx-h100:1", agent_settings={"device_metadata": True})
    assert cluster.client is not None
    claim = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
    }  # fmt: skip
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train", "namespace": "default"},
        "spec": {"resourceClaims": [{"name": "gpus", "resourceClaimName": "train"}],
                 "containers": [{"name": "c", "image": "cuda", "resources": {"claims": [{"name": "gpus"}]}}]},
    }  # fmt: skip
    await cluster.client.create(RESOURCE_CLAIMS, claim, "default")
    await cluster.client.create(PODS, pod, "default")

    async def running() -> bool:
        body = await client_of(cluster).get_raw(PODS, "train", "default")
        return (body.get("status") or {}).get("phase") == "Running"

    await eventually(running)
    body = await cluster.client.get_raw(RESOURCE_CLAIMS, "train", "default")
    uid = body["metadata"]["uid"]
    (result,) = body["status"]["allocation"]["devices"]["results"]
    node = result["pool"]
    runtime = cluster.runtimes[node]
    assert runtime.preparer is not None
    spec = runtime.preparer.effects.specs.read(uid)
    assert spec is not None
    mounts = [m for d in spec["devices"] for m in (d["containerEdits"].get("mounts") or [])]
    container_path = (
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/train/gpu/gpu.nvidia.com-metadata.json"
    )
    (mount,) = [m for m in mounts if m["containerPath"] == container_path]
    assert mount["options"] == ["ro", "bind"]
    host = Path(mount["hostPath"])
    document: dict[str, Any] = json.loads(await asyncio.to_thread(host.read_text))
    (device,) = document["requests"][0]["devices"]
    inventory = cluster.agents[node].inventory
    assert inventory is not None
    (gpu,) = [g for g in inventory.gpus if f"gpu-{g.minor}" == result["device"]]
    assert document["apiVersion"] == "metadata.resource.k8s.io/v1alpha1"
    assert document["metadata"]["uid"] == uid
    assert (device["pool"], device["name"]) == (node, result["device"])
    assert device["attributes"]["uuid"] == {"string": gpu.uuid}
    assert device["attributes"]["resource.kubernetes.io/pciBusID"] == {"string": gpu.pci_bus_id}
    # the kubelet hands the mount's CDI device to the container with the request's device
    client = client_of(cluster)

    async def status_entries() -> list[dict[str, Any]]:  # written after the agent answered the kubelet
        body = await client.get_raw(RESOURCE_CLAIMS, "train", "default")
        return list((body.get("status") or {}).get("devices") or [])

    (entry,) = await eventually(status_entries)
    metadata_id = f"k8s.gpu.nvidia.com/claim={uid}-metadata-gpu"
    assert metadata_id in entry["data"]["cdiDeviceIDs"]

    await cluster.client.delete(PODS, "train", "default")
    specs = runtime.preparer.effects.specs

    def unprepared() -> bool:  # the spec goes first, then the claim's metadata directory, file and all
        return specs.read(uid) is None and not host.parent.parent.exists()

    await eventually(unprepared)
