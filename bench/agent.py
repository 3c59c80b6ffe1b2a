"""The agent as a GPU node runs it: ``gpudra agent --backend nvml`` in a process of its own, its NVML binding a
stand-in for a DGX H100's (bench/nvmlstub/pynvml.py: nvidia-ml-py's constants and structures, the driver calls
answered in Python), against the embedded API server in a process of its own.

Measured: seconds from starting the process to its first ResourceSlice (and to all of them), its resident memory
after it published the node and served 100 prepares (and unprepares) of whole GPUs over its kubelet plugin socket,
and which modules it imported (it writes ``sys.modules`` at exit). The baseline, in the same run, is the
interpreter's own start (``python -c "import asyncio"``): the start-up ratio says how much the agent adds to it.

    python -m bench agent [--quick] [--prepares N]

Goals (issue #38): <= 60 MB resident; first slice <= 1 s after start; nothing of the simulator, kopf, the
embedded cluster (or kubernetes_asyncio's generated models) imported.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import goals
from bench.agentkit import allocated_claim, make_node
from gpudra.agent.kubeletplugin.kubelet_client import KubeletClient
from gpudra.cluster.apiserver.process import APIServerProcess
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import RESOURCE_SLICES

NODE = "gpu-node-1"
GPUS = 8
STUB = Path(__file__).parent / "nvmlstub"
FORBIDDEN = (
    "gpudra.hardware.simulated",
    "gpudra.cluster",
    "gpudra.controller",
    "kopf",
    "kubernetes_asyncio",
    "rich",
    "pygments",
    "aiohttp",
    "grpc",
)
"""What a real node's agent must not import (tests/unit/test_agent_imports.py checks the same list): the simulator,
kopf, the embedded cluster, kubernetes_asyncio's generated models (about 40 MB), rich and pygments (structlog
imports them for colour tracebacks whenever they are installed), aiohttp (14 MiB; the agent's HTTP, client and
server, is on asyncio's streams) and grpc (grpcio, about 19 MiB once it serves; the kubelet plugin serves on
grpclib)."""
# `python -m gpudra agent`, writing the modules it imported to $BENCH_MODULES when it exits
LAUNCH = """
import atexit, json, os, runpy, sys
atexit.register(lambda: open(os.environ["BENCH_MODULES"], "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["gpudra", "agent"]
runpy.run_module("gpudra", run_name="__main__", alter_sys=True)
"""


def _rss_mib(pid: int) -> tuple[float, float]:
    """(resident, peak resident) memory of a process, in MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    found = {k: int(v) / 1024 for k, v in re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", status, re.M)}
    return found["VmRSS"], found["VmHWM"]


def _interpreter_start_s() -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import asyncio"], check=True)
    return time.monotonic() - started


async def _first_slice(client: KubeClient, started: float, resource_version: str) -> float:
    """Seconds from ``started`` to the node's first ResourceSlice (watched from before the agent started)."""
    async for kind, _ in client.watch(
        RESOURCE_SLICES, resource_version=resource_version, field_selector=f"spec.nodeName={NODE}"
    ):
        if kind == "ADDED":
            return time.monotonic() - started
    raise RuntimeError("the slice watch ended before the agent published")


async def _prepares(client: KubeClient, registry: Path, count: int) -> None:
    """``count`` claims of whole GPUs prepared and unprepared, a GPU's worth at a time, as the kubelet calls."""
    kubelet = KubeletClient(registry / "gpu.nvidia.com-reg.sock")
    await kubelet.register()
    try:
        refs = [await allocated_claim(client, f"c{i}", NODE, f"gpu-{i % GPUS}") for i in range(count)]
        for start in range(0, count, GPUS):
            batch = refs[start : start + GPUS]
            prepared = await asyncio.gather(*(kubelet.prepare([ref]) for ref in batch))
            errors = [r.error for answer in prepared for r in answer.values() if r.error]
            unprepared = await asyncio.gather(*(kubelet.unprepare([ref]) for ref in batch))
            errors += [r.error for answer in unprepared for r in answer.values() if r.error]
            if errors:
                raise RuntimeError(f"prepare failed: {errors[0]}")
    finally:
        await kubelet.close()


async def measure(prepares: int) -> None:
    interpreter_s = _interpreter_start_s()
    root = Path(tempfile.mkdtemp(prefix="gb-agent-"))  # short: unix socket paths
    kubeconfig = root / "kubeconfig"
    server = APIServerProcess(kubeconfig=kubeconfig)  # as kube-apiserver, a process of its own
    await server.start()
    client = await KubeClient.from_environment(kubeconfig, field_manager="bench")
    modules_file = root / "modules.json"
    driver_root = root / "driver"  # stand-ins for the stub's device nodes, which the agent waits for at start
    (driver_root / "dev").mkdir(parents=True)
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", *(f"nvidia{minor}" for minor in range(8))):
        (driver_root / "dev" / name).touch()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(STUB), *sys.path[1:]]),
        "BENCH_MODULES": str(modules_file),
        "GPUDRA_NODE_NAME": NODE,
        "GPUDRA_BACKEND": "nvml",
        "GPUDRA_KUBECONFIG": str(kubeconfig),
        "GPUDRA_PLUGIN_DIR": str(root / "plugin"),
        "GPUDRA_REGISTRY_DIR": str(root / "registry"),
        "GPUDRA_CDI_DIR": str(root / "cdi"),
        "GPUDRA_COMPUTE_DOMAIN_PLUGIN_DIR": str(root / "cd"),
        "GPUDRA_DRIVER_ROOT": str(driver_root),
        "GPUDRA_LOG_FORMAT": "json",  # as the chart's defaults have it: one JSON object a line, at INFO
    }
    process: asyncio.subprocess.Process | None = None
    try:
        await make_node(client, NODE)
        _, resource_version = await client.list_raw(RESOURCE_SLICES)
        started = time.monotonic()
        with (root / "agent.log").open("wb") as log:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-c", LAUNCH, env=env, stdout=log, stderr=log
            )
        first_s = await _first_slice(client, started, resource_version)
        await _prepares(client, root / "registry", prepares)
        rss, peak = _rss_mib(process.pid)
        count = len((await client.list_raw(RESOURCE_SLICES))[0])
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 30)
        process = None
        modules = json.loads(modules_file.read_text())
        loaded = sorted({m.split(".")[0] for m in modules if _forbidden(m)})
        print(
            f"agent start to first ResourceSlice: {first_s:.2f} s ({count} slices; interpreter start alone "
            f"{interpreter_s:.2f} s, {first_s / interpreter_s:.1f}x) | {goals.at_most(first_s, 1.0, 's')}"
        )
        print(
            f"agent resident memory after publishing {GPUS} GPUs and {prepares} prepares: {rss:.1f} MiB "
            f"(peak {peak:.1f}) | {goals.at_most(rss, 60, 'MiB')}"
        )
        print(
            f"agent imports: {len(modules)} modules; simulator, kopf, embedded cluster, kubernetes_asyncio, aiohttp, "
            "grpc: "
            f"{', '.join(loaded) or 'none'} | goal none: {'MET' if not loaded else 'NOT MET'}"
        )
    finally:
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()
        await client.close()
        await server.stop()
        shutil.rmtree(root, ignore_errors=True)


def _forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench agent")
    parser.add_argument("--quick", action="store_true", help="the same run (it takes a few seconds)")
    parser.add_argument("--prepares", type=int, default=100)
    args = parser.parse_args(argv)
    asyncio.run(measure(args.prepares))


if __name__ == "__main__":
    main(sys.argv[1:])
