"""The product on the real control plane: kube-scheduler allocates with Kubernetes' own allocator,
kube-controller-manager makes claims from templates and runs Jobs and Deployments, and gpudra's agents prepare
what was allocated. The seed examples and NVIDIA-quickstart-shaped specs run unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _realkit import StartKubernetes, claims, events_of, held_devices, phase, pods, results

from clusterkit import eventually, kubectl

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT / "examples" / "seeds"
MANIFESTS = Path(__file__).parent / "manifests"


async def test_the_seed_examples_run_and_the_unsatisfiable_one_is_explained(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("dgx-h100:2,dgx-a100:1,dgx-a100-80gb:1")
    await kubectl(cluster, "apply", "-f", str(SEEDS))

    async def all_running_but_the_unsatisfiable() -> bool:
        current = await pods(cluster)
        waiting = {name: phase(p) for name, p in current.items() if phase(p) != "Running"}
        return len(current) >= 9 and set(waiting) == {"waits-forever"}

    await eventually(all_running_but_the_unsatisfiable, timeout=120)
    everything = await claims(cluster)
    assert all(n == 1 for n in held_devices(everything).values()), "a device is held by two claims"
    shared = everything["shared-inference-gpu"]
    assert {r["name"] for r in shared["status"]["reservedFor"]} == {"qwen-inference", "embedding-service"}
    current = await pods(cluster)
    assert current["qwen-inference"]["spec"]["nodeName"] == current["embedding-service"]["spec"]["nodeName"]

    async def explained() -> list[str]:
        return [
            e["message"] for e in await events_of(cluster, "b300-please") if e["reason"] == "NoMatchingDevice"
        ]

    (message, *_) = await eventually(explained, timeout=60)
    assert "NVIDIA B300" in message

    async def scheduler_told() -> list[dict[str, Any]]:
        return [e for e in await events_of(cluster, "waits-forever") if e["reason"] == "FailedScheduling"]

    (scheduler, *_) = await eventually(scheduler_told, timeout=60)
    assert scheduler["source"].get("component", "") in {"", "default-scheduler"}


async def test_nvidia_quickstart_shapes_mig_on_one_parent_time_slicing_and_mps(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("dgx-h100:1,dgx-a100:1")
    await kubectl(cluster, "apply", "-f", str(MANIFESTS / "quickstart.yaml"))

    async def running() -> bool:
        current = await pods(cluster)
        return len(current) == 5 and all(phase(p) == "Running" for p in current.values())

    await eventually(running, timeout=90)
    everything = await claims(cluster)
    (mig,) = [c for name, c in everything.items() if name.startswith("mig-pod-")]
    devices = [r["device"] for r in results(mig)]
    assert len(devices) == 4 and len({d.split("-mig-")[0] for d in devices}) == 1, devices
    assert {r["pool"] for r in results(mig)} == {"dgx-a100-0"}

    h100 = cluster.simulated["dgx-h100-0"]
    (ts,) = results(everything["time-sliced-gpu"])
    (mps,) = results(everything["mps-gpu"])
    assert ts["device"] != mps["device"]
    assert h100.gpu(int(ts["device"].removeprefix("gpu-"))).time_slice == 3  # Long
    assert h100.gpu(int(mps["device"].removeprefix("gpu-"))).compute_mode == 3  # EXCLUSIVE_PROCESS
    current = await pods(cluster)
    assert current["ts-pod-0"]["spec"]["nodeName"] == current["ts-pod-1"]["spec"]["nodeName"] == "dgx-h100-0"

    await kubectl(cluster, "delete", "-f", str(MANIFESTS / "quickstart.yaml"), "--wait=true")
    assert h100.gpu(int(mps["device"].removeprefix("gpu-"))).compute_mode == 0
    assert h100.gpu(int(ts["device"].removeprefix("gpu-"))).time_slice == 0
