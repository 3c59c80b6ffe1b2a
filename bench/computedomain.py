"""ComputeDomain formation at scale in the embedded cluster: a Job whose pods each claim one GPU and the domain's
channel, over simulated GB200 NVL72 trays (4 GPUs each, so 4 pods per tray, 18 trays per rack).

From applying the ComputeDomain and the Job, it measures the seconds until every pod's claims are prepared (the
stand-in kubelet marks a pod Running only then: its channel waited for the node's IMEX daemon) and until the
domain's status is Ready over every tray; and counts the requests the API server answered with 409 Conflict (on
the ComputeDomain, and on the clique objects, where the daemons of one clique register), the JSON patches of clique
objects refused because a ``test`` failed (the other way a daemon's write loses a race and is redone), and the
controller's status writes. A small domain (16 pods over 4 trays) is measured first
in the same run as the baseline, so the output is also a ratio; then the scaled domain again beside one busy core
(a process of its own spinning, as another tenant of the machine), and that time against the time idle.
``--quick`` runs only the scaled domain (16 trays) beside the busy core.

Everything runs in one process, as the goal says (the nodes and stand-ins call the API server without HTTP, the
controller over HTTP from its own thread); ``--api-server-process`` puts the API server in a process of its own,
as in a real cluster, every client reaching it over HTTP.

    python -m bench computedomain [--quick | --trays N] [--api-server-process]

Goal (issue #38): 256 pods over 64 trays Ready and prepared in <= 6 s beside one busy core, with 0 conflicts on the
domain and <= 1 redone clique write per daemon (NVIDIA #816: ~8 minutes, slowed by 409 conflicts on the domain's
status).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bench import goals
from bench.busycore import BusyCore
from gpudra.cluster.apiserver.server import FAILED_TEST
from gpudra.cluster.fleet import parse_fleet
from gpudra.cluster.up import EmbeddedCluster, UpOptions
from gpudra.kube.informer import Informer
from gpudra.kube.resources import COMPUTE_DOMAIN_CLIQUES, COMPUTE_DOMAINS, JOBS, PODS
from gpudra.telemetry import configure_logging

NS = "default"
PROFILE = "gb200-nvl72"
GPUS_PER_TRAY = 4


def domain() -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "bench", "namespace": NS},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "bench-channel"}}},
    }


def job(pods: int) -> dict[str, Any]:
    container = {
        "name": "worker",
        "image": "cuda",
        "resources": {"limits": {"nvidia.com/gpu": 1}, "claims": [{"name": "channel"}]},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "bench", "namespace": NS},
        "spec": {
            "completions": pods,
            "parallelism": pods,
            "template": {
                "metadata": {"labels": {"app": "bench"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [container],
                    "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": "bench-channel"}],
                },
            },
        },
    }


@dataclass
class Result:
    trays: int
    pods: int
    bound_s: float
    daemons_s: float
    prepared_s: float
    ready_s: float
    conflicts: int
    """409s on the ComputeDomain (the conflict storm of NVIDIA #816): the goal is none."""
    clique_conflicts: int
    """409s on ComputeDomainCliques, and JSON patches of them refused for a failed test (422): writes the
    daemons had to redo on a fresh read."""
    status_writes: int
    cpu_s: float
    """CPU seconds the cluster's process (control plane, agents, kubelets, controller) spent meanwhile: on a
    machine shared with other work the wall time is longer, never shorter (one process, one GIL)."""
    server_cpu_s: float
    """CPU seconds of the API server's own process meanwhile."""
    plane_cpu_s: dict[str, float] = field(default_factory=dict)
    """CPU seconds meanwhile of each control-plane process apart from this one (kube-apiserver, etcd,
    kube-scheduler, kube-controller-manager; or the embedded API server's process)."""


class Progress:
    """What the run is waiting for, kept from watches (informers): the moment each mark is reached is taken when
    the event arrives, and observing costs one decode per change instead of a list of every pod per poll."""

    def __init__(self, trays: int, pods: int, start: float) -> None:
        self.trays, self.pods, self.start = trays, pods, start
        self.marks: dict[str, float] = {}
        self.done = asyncio.Event()
        self._pods: dict[str, tuple[bool, bool]] = {}  # name -> (bound, running)
        # pods bound, pods running: kept as pods change, not summed over every pod per event
        self._counts = [0, 0]
        self._daemons: dict[str, int] = {}  # clique object -> Ready daemons

    def _mark(self, name: str, reached: bool) -> None:
        if reached:
            self.marks.setdefault(name, time.perf_counter() - self.start)
        if "prepared" in self.marks and "ready" in self.marks:
            self.done.set()

    async def pod(self, kind: str, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        bound, running = self._pods.pop(name, (False, False))
        self._counts[0] -= bound
        self._counts[1] -= running
        if kind != "DELETED":
            bound = bool(body["spec"].get("nodeName"))
            running = (body.get("status") or {}).get("phase") == "Running"
            self._pods[name] = (bound, running)
            self._counts[0] += bound
            self._counts[1] += running
        self._mark("bound", self._counts[0] == self.pods)
        self._mark("prepared", self._counts[1] == self.pods)

    async def clique(self, kind: str, body: dict[str, Any]) -> None:
        ready = sum(1 for d in body.get("daemons") or [] if d.get("status") == "Ready")
        self._daemons[body["metadata"]["name"]] = 0 if kind == "DELETED" else ready
        self._mark("daemons", sum(self._daemons.values()) == self.trays)

    async def domain(self, kind: str, body: dict[str, Any]) -> None:
        status = body.get("status") or {}
        self._mark("ready", status.get("status") == "Ready" and len(status.get("nodes") or []) == self.trays)


async def _conflicts(cluster: EmbeddedCluster) -> Counter[str]:
    if cluster.kubernetes is not None:
        return await cluster.kubernetes.conflicts_by_resource()
    if cluster.server_process is not None:
        return await cluster.server_process.conflicts_by_resource()
    assert cluster.server is not None
    return cluster.server.conflicts_by_resource.copy()


API_SERVERS = ("kube-apiserver", "API server")


def plane_cpu(cluster: EmbeddedCluster) -> dict[str, float]:
    """CPU seconds so far of each control-plane process apart from this one: kube-apiserver, etcd, kube-scheduler
    and kube-controller-manager, or the embedded API server's own process (none when it runs in this process:
    counted there)."""
    plane = cluster.kubernetes
    if plane is not None:
        managed = {
            "etcd": plane.etcd,
            "kube-apiserver": plane.apiserver,
            "kube-scheduler": plane.scheduler,
            "kube-controller-manager": plane.controller_manager,
        }
        return {
            name: _cpu_seconds(m.process.pid)
            for name, m in managed.items()
            if m is not None and m.process is not None
        }
    if cluster.server_process is not None:
        return {"API server": _cpu_seconds(cluster.server_process.pid)}
    return {}


async def form(
    trays: int,
    pods: int,
    *,
    server_apart: bool = False,
    control_plane: Literal["embedded", "kubernetes"] = "embedded",
    qps: float | None = None,
    timeout: float = 300.0,
) -> Result:
    with tempfile.TemporaryDirectory(prefix="gpudra-bench-") as tmp:
        cluster = EmbeddedCluster(
            UpOptions(
                nodes=parse_fleet(f"{PROFILE}:{trays}", {PROFILE}),
                kubeconfig=Path(tmp) / "kubeconfig",
                hardware_poll_seconds=5.0,  # the hardware does not change here; spare the CPU for the flow
                api_server_process=server_apart and control_plane == "embedded",
                control_plane=control_plane,
                control_plane_qps=qps,
            )
        )
        await cluster.start()
        try:
            assert cluster.client is not None
            client = cluster.client
            before = await _conflicts(cluster)
            writes = cluster.metrics.computedomain_status_writes.labels("written")
            writes_before = writes._value.get()
            plane_before = plane_cpu(cluster)
            start, cpu = time.perf_counter(), time.process_time()
            progress = Progress(trays, pods, start)
            informers = [
                Informer(client, PODS, progress.pod, label_selector="job-name=bench"),
                Informer(client, COMPUTE_DOMAIN_CLIQUES, progress.clique),
                Informer(client, COMPUTE_DOMAINS, progress.domain),
            ]
            watching = [asyncio.create_task(i.run()) for i in informers]
            try:
                await asyncio.gather(*(i.synced.wait() for i in informers))
                await client.create(COMPUTE_DOMAINS, domain(), NS)
                await client.create(JOBS, job(pods), NS)
                try:
                    await asyncio.wait_for(progress.done.wait(), timeout)
                except TimeoutError:
                    raise TimeoutError(
                        f"{pods} pods over {trays} trays not ready within {timeout:.0f}s"
                    ) from None
            finally:
                for task in watching:
                    task.cancel()
                await asyncio.gather(*watching, return_exceptions=True)
            # CPU before reading the counts: kube-apiserver's /metrics takes this process seconds to parse
            cpu_s, plane_after = time.process_time() - cpu, plane_cpu(cluster)
            planes = {name: seconds - plane_before.get(name, 0.0) for name, seconds in plane_after.items()}
            marks = progress.marks
            conflicts = await _conflicts(cluster)
            return Result(
                trays,
                pods,
                marks["bound"],
                marks.get("daemons", marks["ready"]),
                marks["prepared"],
                marks["ready"],
                _grown(conflicts, before, "computedomains"),
                _grown(conflicts, before, "computedomaincliques")
                + _grown(conflicts, before, "computedomaincliques" + FAILED_TEST),
                int(writes._value.get() - writes_before),
                cpu_s,
                sum(planes.get(name, 0.0) for name in API_SERVERS),
                planes,
            )
        finally:
            await cluster.stop()


def _cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc; 0 where that cannot be read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _grown(now: Counter[str], before: Counter[str], plural: str) -> int:
    return sum(n - before[k] for k, n in now.items() if k.split("/")[0] == plural)


def _line(label: str, r: Result) -> str:
    return (
        f"{label:<9} {r.pods:>4} pods / {r.trays:>3} trays: bound {r.bound_s:6.2f} s, daemons Ready "
        f"{r.daemons_s:6.2f} s, domain Ready {r.ready_s:6.2f} s, all prepared {r.prepared_s:6.2f} s; "
        f"409 conflicts on the domain {r.conflicts} (on clique objects, 409s and failed patch tests: "
        f"{r.clique_conflicts}), domain status "
        f"writes {r.status_writes}; CPU: cluster {r.cpu_s:.1f} s, API server {r.server_cpu_s:.1f} s"
        + "".join(
            f", {name} {seconds:.1f} s" for name, seconds in r.plane_cpu_s.items() if name not in API_SERVERS
        )
    )


def measure(
    trays: int,
    server_apart: bool = False,
    control_plane: Literal["embedded", "kubernetes"] = "embedded",
    qps: float | None = None,
) -> Result:
    """One scenario in this (fresh) process: 4 pods per tray; ``qps``: the real control plane's client QPS."""
    configure_logging(level="ERROR")  # keep the output readable
    return asyncio.run(
        form(trays, trays * GPUS_PER_TRAY, server_apart=server_apart, control_plane=control_plane, qps=qps)
    )


def in_fresh_process(
    trays: int,
    server_apart: bool,
    control_plane: Literal["embedded", "kubernetes"] = "embedded",
    qps: float | None = None,
) -> Result:
    """Each embedded cluster in its own process: nothing of one run (tasks, sockets, threads) touches the next."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(measure, trays, server_apart, control_plane, qps).result()


def run(trays: int, server_apart: bool = False, *, idle: bool = True) -> None:
    """The baseline and the scaled domain started idle (unless not ``idle``), then the scaled one beside one busy
    core."""
    scaled = None
    if idle:
        baseline = in_fresh_process(4, server_apart)
        print(_line("baseline", baseline), flush=True)
        scaled = in_fresh_process(trays, server_apart)
        print(_line("scaled", scaled), flush=True)
        print(
            f"ratio scaled/baseline {_done(scaled) / _done(baseline):.2f} for "
            f"{scaled.trays / baseline.trays:.0f}x the trays; the controller marked the domain Ready "
            f"{max(scaled.ready_s - scaled.daemons_s, 0):.2f} s after the last daemon"
        )
    with BusyCore():
        busy = in_fresh_process(trays, server_apart)
    print(_line("busy", busy), flush=True)
    beside = f"{_done(busy) / _done(scaled):.2f}x the time idle; " if scaled is not None else ""
    print(
        f"  {busy.pods} pods on {busy.trays} trays all Ready and prepared beside one busy core in "
        f"{_done(busy):.2f} s, {beside}{goals.at_most(_done(busy), 6, 's')}"
    )
    per_daemon = busy.clique_conflicts / max(busy.trays, 1)
    print(f"  409 conflicts on the domain {busy.conflicts}; {goals.below(busy.conflicts, 1, 'conflicts')}")
    print(
        f"  conflicts on clique objects (409s and failed patch tests) {per_daemon:.2f} per daemon; "
        f"{goals.at_most(per_daemon, 1, 'per daemon')}"
    )


def _done(result: Result) -> float:
    return max(result.prepared_s, result.ready_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench computedomain", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--trays", type=int, default=64, help="GB200 trays of the scaled run (4 pods each)")
    parser.add_argument("--quick", action="store_true", help="16 trays, beside the busy core only (CI)")
    parser.add_argument(
        "--api-server-process",
        action="store_true",
        help="the API server in a process of its own (another core)",
    )
    args = parser.parse_args(argv)
    run(16 if args.quick else args.trays, args.api_server_process, idle=not args.quick)


if __name__ == "__main__":
    main()
