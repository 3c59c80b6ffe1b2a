"""NVIDIA's quickstart read with the real kubectl: `kubectl logs` shows each container's nvidia-smi -L for exactly the
GPUs and MIG devices its claims gave it (the UUIDs the allocation chose), and what its CDI devices set up."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from clusterkit import StartCluster, kubectl
from gpudra.cluster.up import EmbeddedCluster
from quickstartkit import GPU_TEST1, GPU_TEST2, GPU_TEST3, GPU_TEST4, GPU_TEST5, GPU_TEST_MPS, MIG_REQUESTS

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH"),
]

_GPU = re.compile(r"^GPU (\d+): (.+) \(UUID: (GPU-[0-9a-f-]+)\)$")
_MIG = re.compile(r"^  MIG (\S+) +Device +(\d+): \(UUID: (MIG-[0-9a-f-]+)\)$")


async def _apply(cluster: EmbeddedCluster, tmp_path: Path, *manifests: str) -> None:
    path = tmp_path / "quickstart.yaml"
    path.write_text("".join(manifests))
    await kubectl(cluster, "apply", "-f", str(path))


async def _running(cluster: EmbeddedCluster, *namespaces: str) -> None:
    for namespace in namespaces:
        await kubectl(
            cluster, "wait", "--for=condition=Ready", "pods", "--all", "-n", namespace, "--timeout=55s"
        )


async def _uuids(cluster: EmbeddedCluster, namespace: str) -> dict[str, dict[str, str]]:
    """claim name -> request -> the UUID of the device the allocation gave it (from the ResourceSlices)."""
    slices = json.loads(await kubectl(cluster, "get", "resourceslices", "-o", "json"))["items"]
    by_device = {
        (s["spec"]["pool"]["name"], d["name"]): d["attributes"]["uuid"]["string"]
        for s in slices
        for d in s["spec"].get("devices", [])
        if "uuid" in d.get("attributes", {})
    }
    claims = json.loads(await kubectl(cluster, "get", "resourceclaims", "-n", namespace, "-o", "json"))[
        "items"
    ]
    return {
        c["metadata"]["name"]: {
            r["request"]: by_device[(r["pool"], r["device"])]
            for r in c["status"]["allocation"]["devices"]["results"]
        }
        for c in claims
    }


def _smi(log: str) -> list[tuple[str, ...]]:
    """The nvidia-smi -L lines of a log, parsed: ("GPU", index, name, uuid) or ("MIG", profile, index, uuid)."""
    found: list[tuple[str, ...]] = []
    for line in log.splitlines():
        if m := _GPU.match(line):
            found.append(("GPU", *m.groups()))
        elif m := _MIG.match(line):
            found.append(("MIG", *m.groups()))
    return found


def _env(log: str) -> dict[str, str]:
    line = next((x for x in log.splitlines() if x.startswith("[gpudra] env: ")), "[gpudra] env: ")
    return dict(item.split("=", 1) for item in line.removeprefix("[gpudra] env: ").split())


def _nodes(log: str) -> set[str]:
    line = next(x for x in log.splitlines() if x.startswith("[gpudra] device nodes: "))
    return set(line.removeprefix("[gpudra] device nodes: ").split())


async def test_quickstart_gpu_tests_1_to_4_show_the_devices_each_container_was_given(
    start_cluster: StartCluster, tmp_path: Path
) -> None:
    cluster = await start_cluster("dgx-h100:1,dgx-a100:1")
    await _apply(cluster, tmp_path, GPU_TEST1, GPU_TEST2, GPU_TEST3, GPU_TEST4)
    await _running(cluster, "gpu-test1", "gpu-test2", "gpu-test3", "gpu-test4")

    # gpu-test1: two pods, two different GPUs, each the one its claim was allocated
    lines = _smi(await kubectl(cluster, "logs", "-n", "gpu-test1", "-l", "app=pod"))
    assert [line[:3] for line in lines] == [("GPU", "0", "NVIDIA H100 80GB HBM3")] * 2
    allocated = await _uuids(cluster, "gpu-test1")
    assert {line[3] for line in lines} == {uuids["gpu"] for uuids in allocated.values()}
    assert len({line[3] for line in lines}) == 2

    # gpu-test2: one pod, two containers, one shared GPU
    log = await kubectl(cluster, "logs", "-n", "gpu-test2", "pod", "--all-containers")
    (claim,) = (await _uuids(cluster, "gpu-test2")).values()
    assert _smi(log) == [("GPU", "0", "NVIDIA H100 80GB HBM3", claim["gpu"])] * 2

    # gpu-test3: two pods, one shared claim, one GPU
    lines = _smi(await kubectl(cluster, "logs", "-n", "gpu-test3", "-l", "app=pod"))
    assert (
        lines
        == [("GPU", "0", "NVIDIA H100 80GB HBM3", (await _uuids(cluster, "gpu-test3"))["single-gpu"]["gpu"])]
        * 2
    )

    # gpu-test4: in each pod, four containers each see one MIG device of their request, all four on one GPU
    pods = (
        await kubectl(cluster, "get", "pod", "-n", "gpu-test4", "-o", "jsonpath={.items[*].metadata.name}")
    ).split()
    assert len(pods) == 4
    allocated = await _uuids(cluster, "gpu-test4")
    parents = set()
    for pod in pods:
        claim = json.loads(await kubectl(cluster, "get", "pod", pod, "-n", "gpu-test4", "-o", "json"))
        (entry,) = claim["status"]["resourceClaimStatuses"]
        given = allocated[entry["resourceClaimName"]]
        seen = []
        for index, (request, profile) in enumerate(MIG_REQUESTS.items()):
            lines = _smi(await kubectl(cluster, "logs", "-n", "gpu-test4", pod, "-c", f"ctr{index}"))
            (gpu, mig) = lines
            assert gpu[:3] == ("GPU", "0", "NVIDIA A100-SXM4-40GB")
            assert mig == ("MIG", profile, "0", given[request])
            seen.append((gpu[3], mig[3]))
        assert len({parent for parent, _ in seen}) == 1 and len({uuid for _, uuid in seen}) == 4
        parents.add(seen[0][0])
    assert len(parents) == 4  # each pod's four MIG devices have a GPU of their own


async def test_quickstart_sharing_specs_show_the_shared_gpus_and_the_mps_setup(
    start_cluster: StartCluster, tmp_path: Path
) -> None:
    cluster = await start_cluster("dgx-h100:1")
    await _apply(cluster, tmp_path, GPU_TEST5, GPU_TEST_MPS)
    await _running(cluster, "gpu-test5", "gpu-test-mps")

    # gpu-test5: ts-ctr0/1 time-slice one GPU, mps-ctr0/1 share another through MPS
    logs = {
        name: await kubectl(cluster, "logs", "-n", "gpu-test5", "pod0", "-c", name)
        for name in ("ts-ctr0", "ts-ctr1", "mps-ctr0", "mps-ctr1")
    }
    (claim,) = (await _uuids(cluster, "gpu-test5")).values()
    assert claim["ts-gpu"] != claim["mps-gpu"]
    gpus = {
        name: {n for n in _nodes(log) if re.fullmatch(r"/dev/nvidia\d+", n)} for name, log in logs.items()
    }
    assert gpus["ts-ctr0"] == gpus["ts-ctr1"] and gpus["mps-ctr0"] == gpus["mps-ctr1"]
    assert len(gpus["ts-ctr0"]) == 1 and gpus["ts-ctr0"] != gpus["mps-ctr0"]
    for name in ("mps-ctr0", "mps-ctr1"):
        env = _env(logs[name])
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"{claim['mps-gpu']}=10240M"
        assert "[gpudra] mounts: " in logs[name] and "-> /tmp/nvidia-mps" in logs[name]
        assert "[gpudra] not run: bash -c " in logs[name]

    # gpu-test-mps: both containers share one GPU through MPS
    log = await kubectl(cluster, "logs", "-n", "gpu-test-mps", "test-pod", "--all-containers")
    (claim,) = (await _uuids(cluster, "gpu-test-mps")).values()
    envs = [_env(part) for part in log.split("[gpudra] no container runs")[1:]]
    assert len(envs) == 2 and all(
        e["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"{claim['mps-gpu']}=10240M" for e in envs
    )
    assert envs[0]["CUDA_MPS_PIPE_DIRECTORY"] == envs[1]["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps"


async def test_a_container_of_another_request_gets_no_mps_setup(
    start_cluster: StartCluster, tmp_path: Path
) -> None:
    """gpu-test5's claim has a time-sliced and an MPS request: the time-sliced container is no MPS client (no pipe
    directory in its environment or mounts), the MPS one is."""
    cluster = await start_cluster("dgx-h100:1")
    await _apply(cluster, tmp_path, GPU_TEST5)
    await _running(cluster, "gpu-test5")
    time_sliced = await kubectl(cluster, "logs", "-n", "gpu-test5", "pod0", "-c", "ts-ctr0")
    assert "CUDA_MPS_PIPE_DIRECTORY" not in _env(time_sliced) and "/tmp/nvidia-mps" not in time_sliced
    mps = await kubectl(cluster, "logs", "-n", "gpu-test5", "pod0", "-c", "mps-ctr0")
    assert _env(mps)["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps" and "-> /tmp/nvidia-mps" in mps


async def _kubectl_rc(cluster: EmbeddedCluster, *args: str) -> tuple[int, str]:
    env = {**os.environ, "KUBECONFIG": str(cluster.options.kubeconfig)}
    proc = await asyncio.create_subprocess_exec(
        "kubectl", *args, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    return proc.returncode or 0, out.decode()


async def test_exec_attach_and_port_forward_say_that_no_container_runs(
    start_cluster: StartCluster, tmp_path: Path
) -> None:
    """With the API server in a process of its own, as `gpudra up --api-server-process` runs it."""
    cluster = await start_cluster("l4x4:1", api_server_process=True)
    await _apply(cluster, tmp_path, GPU_TEST1.replace("gpu-test1", "demo"))
    await _running(cluster, "demo")
    assert _smi(await kubectl(cluster, "logs", "-n", "demo", "pod1"))[0][2] == "NVIDIA L4"
    sentence = "the embedded cluster runs no containers"
    for args in (
        ("exec", "-n", "demo", "pod1", "--", "nvidia-smi"),
        ("attach", "-n", "demo", "pod1"),
        ("port-forward", "-n", "demo", "pod/pod1", "8080:80"),
    ):
        rc, out = await _kubectl_rc(cluster, *args)
        assert rc != 0 and sentence in out, (args, out)
    rc, out = await _kubectl_rc(cluster, "exec", "-n", "demo", "ghost", "--", "true")
    assert rc != 0 and 'pods "ghost" not found' in out


async def test_logs_follow_options_and_a_container_that_has_not_started(
    start_cluster: StartCluster, tmp_path: Path
) -> None:
    cluster = await start_cluster("l4x4:1")
    await _apply(cluster, tmp_path, GPU_TEST2.replace("gpu-test2", "demo"))
    await _running(cluster, "demo")
    rc, out = await _kubectl_rc(cluster, "logs", "-n", "demo", "pod")
    assert rc == 0 and 'Defaulted container "ctr0" out of: ctr0, ctr1' in out
    last = await kubectl(cluster, "logs", "-n", "demo", "pod", "-c", "ctr1", "--tail=1", "--timestamps")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.0{9}Z GPU 0: .*\n", last)
    follow = await asyncio.create_subprocess_exec(
        "kubectl", "logs", "-f", "-n", "demo", "pod", "-c", "ctr0",
        env={**os.environ, "KUBECONFIG": str(cluster.options.kubeconfig)}, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert follow.stdout is not None
    first = await asyncio.wait_for(follow.stdout.readline(), 60)  # the stream is open
    assert first.startswith(b"[gpudra] ")
    await kubectl(cluster, "delete", "pod", "pod", "-n", "demo", "--wait=false")
    rest = await asyncio.wait_for(follow.stdout.read(), 60)  # and ends when the pod stops
    assert await follow.wait() == 0 and b"GPU 0: NVIDIA L4" in rest

    stuck = """apiVersion: v1
kind: Pod
metadata: {name: stuck, namespace: demo}
spec:
  nodeName: l4x4-0
  containers: [{name: ctr, image: ubuntu, resources: {claims: [{name: gpu}]}}]
  resourceClaims: [{name: gpu, resourceClaimName: does-not-exist}]
"""
    await _apply(cluster, tmp_path, stuck)
    await kubectl(
        cluster, "wait", "--for=jsonpath={.status.containerStatuses[0].state.waiting.reason}=ContainerCreating",
        "pod/stuck", "-n", "demo", "--timeout=60s",
    )  # fmt: skip
    rc, out = await _kubectl_rc(cluster, "logs", "-n", "demo", "stuck")
    assert rc != 0
    assert (
        'Error from server (BadRequest): container "ctr" in pod "stuck" is waiting to start: ContainerCreating'
        in out
    )
