"""What the real-node tier shares: workloads on the GPU workload image, the containers' own account of their GPUs
(the simulated nvidia-smi's lines in ``kubectl logs``), and what gpudra's agent left on each node (CDI specs, its
checkpoint), read from the node's directories on this machine."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml

from clusterkit import kubectl
from gpudra.agent.checkpoint import ClaimEntry, decode_checkpoint
from gpudra.agent.runtime import CHECKPOINT_FILE
from gpudra.cluster.realnode.containerd import NAMESPACE, SOCKET
from gpudra.cluster.realnode.install import RELEASE
from gpudra.cluster.realnode.node import RealNode
from gpudra.cluster.realnode.sandbox import run
from gpudra.cluster.up import EmbeddedCluster
from gpudra.config import ControllerSettings
from gpudra.hardware.gpus.inventory import GpuInfo
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import PODS, RESOURCE_CLAIMS

StartRealNodes = Callable[..., Awaitable[EmbeddedCluster]]
FAST_CONTROLLER = ControllerSettings(pending_grace_seconds=0.2, pending_interval_seconds=0.5)
WORKLOAD = "localhost/gpudra-workload:latest"
DRIVER = "gpu.nvidia.com"
_IMAGE = re.compile(r"(?m)^(\s*)image: \S+$")
_UUID_LINE = re.compile(r"^(?:GPU|MIG) \d+: \(UUID: (\S+)\)$")


def on_workload_image(manifest: str) -> str:
    """``manifest`` with every container on the GPU workload image, taken from the node (no registry here; a
    ``:latest`` image is pulled by default)."""
    return _IMAGE.sub(rf"\1image: {WORKLOAD}\n\1imagePullPolicy: IfNotPresent", manifest)


def admin(cluster: EmbeddedCluster) -> KubeClient:
    assert cluster.client is not None
    return cluster.client


def real_node(cluster: EmbeddedCluster, name: str) -> RealNode:
    assert cluster.real_nodes is not None
    return cluster.real_nodes.nodes[name]


def real_node_names(cluster: EmbeddedCluster) -> list[str]:
    assert cluster.real_nodes is not None
    return sorted(cluster.real_nodes.nodes)


async def tag_gpudra_image(cluster: EmbeddedCluster, node: str, tag: str) -> str:
    """gpudra's image loaded on the node under another tag, as a new release would bring it; the new name."""
    assert cluster.real_nodes is not None
    image = cluster.real_nodes.runtime.images.gpudra
    tagged = f"{image.rsplit(':', 1)[0]}:{tag}"
    ctr = [str(cluster.real_nodes.runtime.ctr), "--address", SOCKET, "--namespace", NAMESPACE]
    await run(real_node(cluster, node).sandbox.inside([*ctr, "images", "tag", "--force", image, tagged]))
    return tagged


async def pods(cluster: EmbeddedCluster, namespace: str | None) -> dict[str, dict[str, Any]]:
    items, _ = await admin(cluster).list_raw(PODS, namespace)
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in items}


def running(pod: dict[str, Any]) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and all(s.get("ready") and "running" in (s.get("state") or {}) for s in statuses)


def container_ids(pod: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """Container name -> (its runtime's container id, its restart count)."""
    return {
        s["name"]: (s.get("containerID", ""), s.get("restartCount", 0))
        for s in (pod.get("status") or {}).get("containerStatuses") or []
    }


async def helm(cluster: EmbeddedCluster, command: str, *args: str) -> str:
    """``helm <command> gpudra <the chart> <args>`` on gpudra's release, as its user runs it."""
    assert cluster.real_nodes is not None and cluster.kubernetes is not None
    release = [RELEASE, str(cluster.real_nodes.chart)] if command in ("upgrade", "install") else [RELEASE]
    return await run(
        [
            str(cluster.real_nodes.helm), command, *release, *args, "--namespace", "gpudra",
            "--kubeconfig", str(cluster.kubernetes.admin_kubeconfig),
        ]
    )  # fmt: skip


async def apply(cluster: EmbeddedCluster, manifest: str) -> None:
    await kubectl(cluster, "apply", "-f", "-", stdin=manifest)


async def all_running(cluster: EmbeddedCluster, namespaces: list[str]) -> dict[str, dict[str, Any]]:
    """The pods of ``namespaces`` once every one runs with every container ready; {} before."""
    found: dict[str, dict[str, Any]] = {}
    for namespace in namespaces:
        found |= await pods(cluster, namespace)
    return found if found and all(running(p) for p in found.values()) else {}


def smi_report(log: str) -> tuple[list[str], list[str]]:
    """(UUIDs, device nodes) the simulated nvidia-smi printed: NVIDIA_VISIBLE_DEVICES and the /dev entries."""
    uuids = [m.group(1) for line in log.splitlines() if (m := _UUID_LINE.match(line.strip()))]
    nodes = next(
        (line.split(":", 1)[1].split() for line in log.splitlines() if line.startswith("Device nodes:")), []
    )
    return uuids, [n for n in nodes if n != "none"]


def gpus(cluster: EmbeddedCluster, node: str) -> list[GpuInfo]:
    """The node's simulated GPUs as the agent in its pod keeps them now (their state file)."""
    return list(NvmlBackend(node, nvml=cluster.simulated_gpus(node)).read_inventory().gpus)


def checkpoint(cluster: EmbeddedCluster, node: str) -> dict[str, ClaimEntry]:
    """The node's agent's prepared claims, by claim UID (its checkpoint in the kubelet's plugin directory)."""
    path = real_node(cluster, node).dirs.kubelet / "plugins" / DRIVER / CHECKPOINT_FILE
    if not path.exists():
        return {}
    claims, _ = decode_checkpoint(path.read_bytes(), node=node, driver=DRIVER)
    return claims


def claim_specs(cluster: EmbeddedCluster, node: str) -> list[Path]:
    """The per-claim CDI specs in the node's /var/run/cdi."""
    return sorted(real_node(cluster, node).dirs.cdi.glob("*claim_*.json"))


def injected_nodes(
    cluster: EmbeddedCluster, node: str, claim_uid: str, requests: set[str] | None
) -> set[str]:
    """The GPU device nodes gpudra's CDI spec gives a container of the claim that names ``requests`` (None: the
    whole claim): the nodes of those requests' devices, without the control nodes every container gets."""
    entry = checkpoint(cluster, node)[claim_uid]
    spec = yaml.safe_load(next(p for p in claim_specs(cluster, node) if claim_uid in p.name).read_text())
    wanted = {
        cdi_id.split("=", 1)[1]
        for device in entry.devices
        if requests is None or set(device.request_names) & requests
        for cdi_id in device.cdi_device_ids
    }
    return {
        n["path"]
        for device in spec["devices"]
        if device["name"] in wanted
        for n in device["containerEdits"].get("deviceNodes", [])
        if re.match(r"/dev/nvidia(\d+$|-caps/)", n["path"])
    }


async def claim_of(cluster: EmbeddedCluster, pod: dict[str, Any], name: str) -> dict[str, Any]:
    """The ResourceClaim a pod's ``resourceClaims`` entry ``name`` resolved to."""
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
    claim = next((s["resourceClaimName"] for s in statuses if s["name"] == name), None)
    if claim is None:
        spec = next(c for c in pod["spec"]["resourceClaims"] if c["name"] == name)
        claim = spec["resourceClaimName"]
    return await admin(cluster).get_raw(RESOURCE_CLAIMS, claim, pod["metadata"]["namespace"])
