"""NodePrepareResources and NodeUnprepareResources latency as the kubelet sees it: ``gpudra agent`` in a process of
its own on one simulated dgx-h100, the embedded API server in another, and the kubelet's side (gpudra's
KubeletClient, one call per claim as the kubelet makes one per pod) in this process, over the agent's plugin
socket.

Each kind of device runs on the node set up for it: whole GPUs, whole GPUs with an MPS or a time-slicing config
(MIG off); static MIG (every GPU with seven 1g.10gb instances); dynamic MIG (MIG on, no instances, the agent's
policy Dynamic: prepare creates the instance in the simulated NVML, unprepare destroys it). A round puts one claim
on every device of the kind in flight at once, up to 64 (a dgx-h100 has 8 GPUs, 56 1g.10gb placements), then
unprepares them all at once; rounds repeat until each kind has enough samples for its p99. A line "1 in flight"
follows each kind: 32 calls made one after the other, the latency without a queue. The baseline, in the
same run and at the same concurrency, is a NodePrepareResources call with no claims: the gRPC round trip and
the agent's dispatch, which every prepare pays. Each kind's rounds, and the baseline, also print the agent
process's CPU per call (user and system, threads included, from /proc, over the prepares and over the unprepares;
the baseline's is the agent's gRPC server path alone): on a machine shared with other work the latencies swing by
2x from run to run, the CPU much less.

    python -m bench prepare [--quick]

``--quick`` (CI) runs one round of the whole-GPU kinds only: 8 calls prove nothing about a p99. The full run ends
with whole GPUs through a real kubelet on kube-apiserver (bench/kubeletprepare.py), printed beside these.

Goals (issue #38), p99 of prepare and of unprepare: whole GPU <= 20 ms, static MIG <= 30 ms, dynamic MIG <= 100 ms,
MPS and time-slicing <= 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import goals, kubeletprepare
from bench.agentkit import allocated_claim, make_node, percentile
from bench.computedomain import _cpu_seconds
from gpudra.agent.kubeletplugin import ClaimRef
from gpudra.agent.kubeletplugin.kubelet_client import KubeletClient
from gpudra.cluster.agentprocess import AgentProcess
from gpudra.cluster.apiserver.process import APIServerProcess
from gpudra.config import AgentSettings
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.hardware.simulated.fake_nvml import FakeNvml
from gpudra.kube.client import KubeClient

NODE = "dgx-1"
IN_FLIGHT = 64
SEQUENTIAL = 32  # calls of each kind made one at a time, beside the goal's lines: the latency without a queue
MIG_1G = [f"mig-1g10gb-19-{start}" for start in range(7)]  # 1g.10gb: GI profile id 19, placements 0..6


@dataclass(frozen=True)
class Kind:
    name: str
    layout: str  # "whole", "static-mig" or "dynamic-mig": how the node's GPUs are set up
    goal_ms: float
    device_class: str = "gpu.nvidia.com"
    sharing: dict[str, Any] | None = None
    config_kind: str = "GpuConfig"

    def devices(self, minors: list[int]) -> list[str]:
        if self.layout == "whole":
            return [f"gpu-{m}" for m in minors]
        return [f"gpu-{m}-{mig}" for m in minors for mig in MIG_1G][:IN_FLIGHT]


KINDS = [
    Kind("whole GPU", "whole", 20),
    Kind("MPS", "whole", 50, sharing={"strategy": "MPS"}),
    Kind("time-slicing", "whole", 50, sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}),
    Kind("static MIG", "static-mig", 30, device_class="mig.nvidia.com"),
    Kind("dynamic MIG", "dynamic-mig", 100, device_class="mig.nvidia.com"),
]  # fmt: skip


def simulated_node(state: Path, layout: str) -> list[int]:
    """A dgx-h100's simulated GPUs set up for ``layout`` and kept in ``state`` for the agent; their minors."""
    fake = FakeNvml.from_profile("dgx-h100", node_name=NODE)
    backend = NvmlBackend(NODE, nvml=fake)
    gpus = backend.read_inventory().gpus
    for gpu in gpus if layout != "whole" else ():
        backend.set_mig_mode(gpu.index, True)
        for start in range(7) if layout == "static-mig" else ():
            backend.create_mig_device(gpu.index, "1g.10gb", start)
    fake.persist_to(state)
    return sorted(g.minor for g in gpus)


async def timed(call: Awaitable[dict[str, Any]]) -> float:
    """Milliseconds the call took; a claim it answers with an error stops the benchmark."""
    started = time.perf_counter()
    answer = await call
    elapsed = (time.perf_counter() - started) * 1000
    errors = [r.error for r in answer.values() if r.error]
    if errors:
        raise RuntimeError(f"the agent refused: {errors[0]}")
    return elapsed


@dataclass
class Measured:
    """One line's calls: each call's milliseconds, and the agent's CPU seconds while they ran (None: not taken)."""

    kind: Kind
    in_flight: int
    prepares: list[float]
    unprepares: list[float]
    prepare_cpu: float | None = None
    unprepare_cpu: float | None = None


async def rounds(
    kubelet: KubeletClient,
    make: Callable[[int], Awaitable[list[ClaimRef]]],
    samples: int,
    agent_cpu: Callable[[], float],
) -> tuple[list[float], list[float], float, float]:
    """Prepare every claim of a round at once, then unprepare them at once, until ``samples`` of each; the
    agent's CPU seconds over the prepares and over the unprepares (the claims' creation between is left out)."""
    prepares: list[float] = []
    unprepares: list[float] = []
    prepare_cpu = unprepare_cpu = 0.0
    round_no = 0
    while len(prepares) < samples:
        refs = await make(round_no)
        started = agent_cpu()
        prepares += await asyncio.gather(*(timed(kubelet.prepare([r])) for r in refs))
        prepared = agent_cpu()
        unprepares += await asyncio.gather(*(timed(kubelet.unprepare([r])) for r in refs))
        prepare_cpu += prepared - started
        unprepare_cpu += agent_cpu() - prepared
        round_no += 1
    return prepares, unprepares, prepare_cpu, unprepare_cpu


async def one_at_a_time(
    kubelet: KubeletClient, refs: list[ClaimRef], count: int
) -> tuple[list[float], list[float]]:
    """Without a queue: each claim prepared and unprepared before the next call (``count`` of each)."""
    prepares: list[float] = []
    unprepares: list[float] = []
    for ref in (refs * count)[:count]:
        prepares.append(await timed(kubelet.prepare([ref])))
        unprepares.append(await timed(kubelet.unprepare([ref])))
    return prepares, unprepares


async def run_layout(
    client: KubeClient, kubeconfig: Path, root: Path, layout: str, samples: int
) -> list[Measured]:
    """Start an agent on a node of ``layout``, measure the baseline and each kind of that layout, stop it."""
    directory = root / layout
    directory.mkdir()
    minors = simulated_node(directory / "gpus.state", layout)
    settings = AgentSettings(
        node_name=NODE,
        backend="simulated",
        simulated_profile="dgx-h100",
        simulated_state=directory / "gpus.state",
        mig_policy="Dynamic" if layout == "dynamic-mig" else "Static",
        kubeconfig=kubeconfig,
        plugin_dir=directory / "p",
        registry_dir=directory / "r",
        cdi_dir=directory / "cdi",
        compute_domain_plugin_dir=directory / "cd",
        log_format="json",  # logged as the chart's defaults have it: one JSON object a line, at INFO
    )
    agent = AgentProcess(settings, directory / "agent.log")
    await agent.start(timeout=120)
    kubelet = KubeletClient(directory / "r" / "gpu.nvidia.com-reg.sock")
    results: list[Measured] = []
    try:
        await kubelet.register()
        baseline: list[float] = []
        started = _cpu_seconds(agent.pid)
        while len(baseline) < samples:
            baseline += await asyncio.gather(*(timed(kubelet.prepare([])) for _ in range(IN_FLIGHT)))
        baseline_cpu = _cpu_seconds(agent.pid) - started
        results.append(
            Measured(
                Kind("baseline: a call with no claims", layout, 0), IN_FLIGHT, baseline, [], baseline_cpu, 0.0
            )
        )
        for kind in (k for k in KINDS if k.layout == layout):
            devices = kind.devices(minors)

            async def make(round_no: int, kind: Kind = kind, devices: list[str] = devices) -> list[ClaimRef]:
                slug = kind.name.replace(" ", "-").lower()
                return [
                    await allocated_claim(
                        client, f"{slug}-{round_no}-{i}", NODE, device, device_class=kind.device_class,
                        sharing=kind.sharing, config_kind=kind.config_kind,
                    )
                    for i, device in enumerate(devices)
                ]  # fmt: skip

            measured = await rounds(kubelet, make, samples, lambda: _cpu_seconds(agent.pid))
            results.append(Measured(kind, len(devices), *measured))
            alone = await one_at_a_time(kubelet, await make(-1), min(samples, SEQUENTIAL))
            results.append(Measured(dataclasses.replace(kind, goal_ms=0), 1, *alone))
    finally:
        await kubelet.close()
        await agent.stop()
    return results


async def measure(samples: int, layouts: tuple[str, ...]) -> None:
    root = Path(tempfile.mkdtemp(prefix="gb-prep-"))  # short: unix socket paths
    kubeconfig = root / "kubeconfig"
    server = APIServerProcess(kubeconfig=kubeconfig)  # as kube-apiserver, a process of its own
    await server.start()
    client = await KubeClient.from_environment(kubeconfig, field_manager="bench")
    try:
        await make_node(client, NODE)
        for layout in layouts:
            for measured in await run_layout(client, kubeconfig, root, layout, samples):
                report(measured)
    finally:
        await client.close()
        await server.stop()
        shutil.rmtree(root, ignore_errors=True)


def report(m: Measured) -> None:
    kind = m.kind
    for verb, samples in (("prepare", m.prepares), ("unprepare", m.unprepares)):
        if not samples:
            continue
        p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
        line = f"{verb} {kind.name}, {m.in_flight} in flight: p50 {p50:.1f} ms, p99 {p99:.1f} ms ({len(samples)} calls)"
        print(line + (f" | {goals.at_most(p99, kind.goal_ms, 'ms')}" if kind.goal_ms else ""), flush=True)
    if m.prepare_cpu is not None and m.unprepare_cpu is not None and m.prepares:
        per = 1000 / len(m.prepares)
        unprepare = f", unprepare {m.unprepare_cpu * per:.2f} ms" if m.unprepares else ""
        print(
            f"  the agent's CPU a call, {kind.name}: prepare {m.prepare_cpu * per:.2f} ms{unprepare}"
            " (steadier than the latencies on a shared machine)",
            flush=True,
        )


KUBELET_ROUNDS = 13  # 104 calls of each kind


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench prepare")
    parser.add_argument("--quick", action="store_true", help="one round of whole GPUs, MPS and time-slicing")
    args = parser.parse_args(argv)
    if args.quick:
        asyncio.run(measure(1, ("whole",)))
    else:
        asyncio.run(measure(200, ("whole", "static-mig", "dynamic-mig")))
        kubeletprepare.run(KUBELET_ROUNDS)


if __name__ == "__main__":
    main(sys.argv[1:])
