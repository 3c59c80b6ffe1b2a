"""docs/simulator.md's fault walk-through with the real kubectl only: a GpuFault (or `gpudra sim fault`) on a
simulated GPU has the effects real hardware has through the real agent: the device is tainted on its slice, the
claim prepared on it turns Healthy=False, the Node gets a GpuHealth Event, and after the quiet period it all
recovers. A lost GPU leaves the slice and comes back; a GB200 tray that leaves its NVLink fabric loses its clique
label and gets it back. All of it with the agents in gpudra up's process and in processes of their own."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from clusterkit import StartCluster, eventually, kubectl
from gpudra.cluster.up import EmbeddedCluster

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH"),
]
CLIQUE_LABEL = "nvidia.com/gpu.clique"


async def get_json(cluster: EmbeddedCluster, *args: str) -> Any:
    return json.loads(await kubectl(cluster, "get", *args, "-o", "json"))


async def apply_fault(cluster: EmbeddedCluster, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """kubectl apply a GpuFault; its status once the simulator has acted on it."""
    body = {
        "apiVersion": "sim.gpudra.dev/v1alpha1",
        "kind": "GpuFault",
        "metadata": {"name": name},
        "spec": spec,
    }
    path = cluster.options.kubeconfig.parent / f"{name}.yaml"
    path.write_text(json.dumps(body))
    await kubectl(cluster, "apply", "-f", str(path))

    async def status() -> dict[str, Any]:
        return dict((await get_json(cluster, "gpufault", name)).get("status") or {})

    result: dict[str, Any] = await eventually(status, 30.0, interval=0.1)
    return result


async def slice_devices(cluster: EmbeddedCluster, node: str) -> dict[str, dict[str, Any]]:
    listing = await get_json(cluster, "resourceslices")
    return {
        d["name"]: d
        for s in listing["items"]
        if s["spec"].get("nodeName") == node
        for d in s["spec"].get("devices") or []
    }


async def healthy(cluster: EmbeddedCluster, claim: str, device: str) -> dict[str, Any]:
    body = await get_json(cluster, "resourceclaim", claim)
    (entry,) = [e for e in body["status"]["devices"] if e["device"] == device]
    return dict(next(c for c in entry["conditions"] if c["type"] == "Healthy"))


async def node_events(cluster: EmbeddedCluster, node: str, reason: str) -> list[str]:
    listing = await get_json(cluster, "events", "--field-selector", f"involvedObject.name={node}")
    return [e["message"] for e in listing["items"] if e["reason"] == reason]


async def running_claim(cluster: EmbeddedCluster) -> tuple[str, str]:
    """examples/sim/train-on-h100.yaml applied with kubectl and its pod running: (node, device)."""
    await kubectl(cluster, "apply", "-f", str(ROOT / "examples" / "sim" / "train-on-h100.yaml"))

    async def running() -> bool:
        return bool((await get_json(cluster, "pod", "train")).get("status", {}).get("phase") == "Running")

    await eventually(running, 30.0, interval=0.1)

    async def status_written() -> dict[str, Any] | None:  # the agent writes it after answering the kubelet
        claim = await get_json(cluster, "resourceclaim", "train")
        return claim if (claim.get("status") or {}).get("devices") else None

    claim = await eventually(status_written, 30.0, interval=0.1)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    return result["pool"], result["device"]


@pytest.fixture(params=["agents in gpudra up", "agent processes"])
async def cluster(request: pytest.FixtureRequest, start_cluster: StartCluster) -> EmbeddedCluster:
    """Both ways agents run: in ``gpudra up``'s process, where faults reach their simulated GPUs directly, and in
    processes of their own (``--agent-processes``), where they go through each process's fault inbox."""
    return await start_cluster(
        "dgx-h100:1,gb200-nvl72:1",
        hardware_poll_seconds=0.1,
        agent_settings={"health_recovery_seconds": 2.0},
        agent_processes=request.param == "agent processes",
    )


async def test_xid_from_kubectl_taints_marks_the_claim_and_recovers(cluster: EmbeddedCluster) -> None:
    node, device = await running_claim(cluster)
    assert (await healthy(cluster, "train", device))["status"] == "True"

    status = await apply_fault(
        cluster, "xid79", {"nodeName": node, "device": device, "fault": "Xid", "xid": 79}
    )
    assert status["phase"] == "Injected", status
    assert "XID 79" in status["message"]

    async def tainted() -> list[dict[str, Any]]:
        return list((await slice_devices(cluster, node))[device].get("taints") or [])

    (taint,) = await eventually(tainted, 30.0, interval=0.1)
    assert (taint["key"], taint["value"], taint["effect"]) == ("gpu.nvidia.com/xid", "79", "NoSchedule")

    async def unhealthy() -> dict[str, Any] | None:
        condition = await healthy(cluster, "train", device)
        return condition if condition["status"] == "False" else None

    condition = await eventually(unhealthy, 30.0, interval=0.1)
    assert condition["reason"] == "Xid79"
    assert any("XID 79" in m for m in await node_events(cluster, node, "GpuHealth"))

    async def recovered() -> bool:
        quiet = not (await slice_devices(cluster, node))[device].get("taints")
        return quiet and (await healthy(cluster, "train", device))["status"] == "True"

    await eventually(recovered, 30.0, interval=0.1)


async def test_lost_gpu_leaves_the_slice_and_recover_brings_it_back(cluster: EmbeddedCluster) -> None:
    node, device = await running_claim(cluster)
    status = await apply_fault(cluster, "lost", {"nodeName": node, "device": device, "fault": "GpuLost"})
    assert status["phase"] == "Injected", status

    async def gone() -> bool:
        return device not in await slice_devices(cluster, node)

    await eventually(gone, 30.0, interval=0.1)
    assert (await eventually(lambda: _unhealthy_reason(cluster, device), 30.0, interval=0.1)) == "GpuLost"

    status = await apply_fault(cluster, "back", {"nodeName": node, "device": device, "fault": "Recover"})
    assert status["phase"] == "Injected" and "answers again" in status["message"], status

    async def back() -> bool:
        return device in await slice_devices(cluster, node)

    await eventually(back, 30.0, interval=0.1)
    await eventually(lambda: _is_healthy(cluster, device), 30.0, interval=0.1)


async def _unhealthy_reason(cluster: EmbeddedCluster, device: str) -> str | None:
    condition = await healthy(cluster, "train", device)
    return str(condition["reason"]) if condition["status"] == "False" else None


async def _is_healthy(cluster: EmbeddedCluster, device: str) -> bool:
    return str((await healthy(cluster, "train", device))["status"]) == "True"


async def test_tray_leaving_its_nvlink_fabric_loses_its_clique_until_it_recovers(
    cluster: EmbeddedCluster,
) -> None:
    async def clique() -> str | None:
        labels = (await get_json(cluster, "node", "gb200-nvl72-0"))["metadata"].get("labels") or {}
        return labels.get(CLIQUE_LABEL)

    before = await eventually(clique, 30.0, interval=0.1)
    for example in ("tray-fabric-lost.yaml", "recover-tray.yaml"):
        path = ROOT / "examples" / "sim" / example
        await kubectl(cluster, "apply", "-f", str(path))
        if example.startswith("tray-fabric"):
            await eventually(lambda: _no(clique), 30.0, interval=0.1)
            assert await node_events(cluster, "gb200-nvl72-0", "NVLinkCliqueLost")
    assert await eventually(clique, 30.0, interval=0.1) == before
    listing = await kubectl(cluster, "get", "gpufaults")
    assert "tray0-fabric-lost" in listing and "Injected" in listing


async def _no(check: Callable[[], Awaitable[Any]]) -> bool:
    return not await check()


async def test_rejected_fault_says_why(cluster: EmbeddedCluster) -> None:
    status = await apply_fault(
        cluster, "nine", {"nodeName": "dgx-h100-0", "device": "gpu-9", "fault": "GpuLost"}
    )
    assert (status["phase"], status["message"]) == (
        "Rejected",
        "dgx-h100-0 has no GPU gpu-9 (its GPUs: gpu-0, gpu-1, gpu-2, gpu-3, gpu-4, gpu-5, gpu-6, gpu-7)",
    )


async def gpudra_sim(cluster: EmbeddedCluster, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpudra", "sim", "fault", *args,
        env={**os.environ, "KUBECONFIG": str(cluster.options.kubeconfig)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


@pytest.mark.slow
async def test_gpudra_sim_fault_reaches_the_running_cluster(cluster: EmbeddedCluster) -> None:
    node, device = await running_claim(cluster)
    code, out = await gpudra_sim(cluster, node, device, "ecc", "double-bit")
    assert code == 0 and "double-bit ECC error" in out, out

    async def unhealthy() -> bool:
        return await _unhealthy_reason(cluster, device) == "EccDoubleBit"

    await eventually(unhealthy, 30.0, interval=0.1)
    code, out = await gpudra_sim(cluster, node, "gpu-12", "xid", "79")
    assert code == 2 and "has no GPU gpu-12" in out, out
    code, out = await gpudra_sim(cluster, node, "all", "recover")
    assert code == 0 and out.startswith(f"Nothing to recover on {node}: "), out  # nothing was "Injected"
    assert (await gpudra_sim(cluster, node, "gpu-5", "gpu-lost"))[0] == 0
    code, out = await gpudra_sim(cluster, node, "all", "recover")
    assert code == 0 and out.startswith(f"Recovered on {node}: GPU 5 (GPU-") and "answers again" in out, out
