"""`gpudra agent` given the host's driver root (the chart mounts it at /driver-root) waits at start until the GPUs'
device nodes are there, says what is missing, and offers the kubelet nothing meanwhile: before, it published the
GPUs at once, and every container given one stopped at its creation with containerd's "failed to stat CDI host
device", which names neither gpudra nor driverRoot. It says so on the Node too (a Warning Event, for kubectl
describe node). Once the nodes come, it goes on, and its CDI specs name them where the host has them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from gpudra.agent.kubeletplugin import ClaimRef
from gpudra.agent.kubeletplugin.kubelet_client import KubeletClient
from gpudra.cluster.agentprocess import AgentProcess
from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.config import AgentSettings
from gpudra.kube.client import KubeClient
from gpudra.kube.kubeconfig import Credentials, write_kubeconfig
from gpudra.kube.resources import EVENTS, NAMESPACES, NODES, RESOURCE_CLAIMS, RESOURCE_SLICES
from gpudra.testing import eventually

NODE = "gpu-node-7"
DRIVER_ROOT = Path("/run/nvidia/driver")


async def allocated_claim(client: KubeClient, device: str) -> ClaimRef:
    """A claim in ``default`` allocated ``device`` of the node, as the scheduler leaves it."""
    claim = await client.create(
        RESOURCE_CLAIMS,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "train"},
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
            },
        },
        "default",
    )
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": NODE, "device": device}]
            }
        },
        "reservedFor": [{"resource": "pods", "name": "train-0", "uid": "pod-train-0"}],
    }
    claim = await client.replace(RESOURCE_CLAIMS, claim, subresource="status")
    return ClaimRef(namespace="default", uid=claim["metadata"]["uid"], name="train")


async def node_events(client: KubeClient) -> list[dict[str, Any]]:
    events, _ = await client.list_raw(EVENTS, "default")
    return [
        e for e in events if e["involvedObject"].get("kind") == "Node" and e["involvedObject"]["name"] == NODE
    ]


async def test_the_agent_waits_for_the_gpus_device_nodes_under_the_driver_root(
    tmp_path: Path, apiserver: EmbeddedAPIServer
) -> None:
    mount = tmp_path / "driver-root"  # the host's /run/nvidia/driver, as the agent's pod sees it
    (mount / "dev").mkdir(parents=True)
    (mount / "dev" / "nvidiactl").touch()
    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig", Credentials(server=apiserver.url, token=apiserver.token())
    )
    client = await KubeClient.from_environment(kubeconfig, field_manager="test")
    await client.apply_object(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}
    )
    await client.apply_object(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    settings = AgentSettings(
        node_name=NODE,
        backend="simulated",
        simulated_profile="l4x4",
        kubeconfig=kubeconfig,
        plugin_dir=tmp_path / "p",
        registry_dir=tmp_path / "r",
        cdi_dir=tmp_path / "cdi",
        compute_domain_plugin_dir=tmp_path / "cd",
        driver_root=DRIVER_ROOT,
        driver_root_mount=mount,
        log_format="json",
    )
    log = tmp_path / "agent.log"
    agent = AgentProcess(settings, log)
    ready = asyncio.create_task(agent.start(timeout=90))
    try:

        def said_of_device_nodes() -> list[dict[str, Any]]:
            lines = log.read_text().splitlines() if log.exists() else []
            return [json.loads(line) for line in lines if "device nodes" in line]

        said = await eventually(said_of_device_nodes, timeout=60, what="the agent says what it waits for")
        assert said[0]["event"] == "waiting for the GPUs' device nodes"
        assert said[0]["problem"].startswith(
            "the node has no /run/nvidia/driver/dev/nvidia0, /run/nvidia/driver/dev/nvidia1, "
            "/run/nvidia/driver/dev/nvidia2, /run/nvidia/driver/dev/nvidia3, looked for at "
            f"{mount} in the agent's container: a container given these GPUs could not start"
        )
        (event,) = await eventually(lambda: node_events(client), what="the Node's Event")
        assert (event["type"], event["reason"]) == ("Warning", "DeviceNodesMissing")
        assert event["message"] == said[0]["problem"]
        assert not ready.done(), "the agent said it was ready while it waited"
        assert not list((tmp_path / "r").glob("*.sock")), (
            "the agent offered the kubelet a plugin while it waited"
        )
        slices, _ = await client.list_raw(RESOURCE_SLICES)
        assert slices == []

        for minor in range(4):
            (mount / "dev" / f"nvidia{minor}").touch()
        await asyncio.wait_for(ready, timeout=90)

        kubelet = KubeletClient(tmp_path / "r" / "gpu.nvidia.com-reg.sock")
        try:
            await kubelet.register()
            ref = await allocated_claim(client, "gpu-2")
            answer = await kubelet.prepare([ref])
            assert answer[ref.uid].error == ""
        finally:
            await kubelet.close()
        (spec_file,) = (tmp_path / "cdi").glob(f"*{ref.uid}*")
        spec = json.loads(spec_file.read_text())
        host_paths = {n["hostPath"] for d in spec["devices"] for n in d["containerEdits"]["deviceNodes"]}
        assert host_paths == {"/run/nvidia/driver/dev/nvidia2"}
    finally:
        ready.cancel()
        await agent.stop()
        await client.close()
