"""The real control plane against the embedded one, end to end: pods with one GPU claim each, from creation to
Running, on the same simulated fleet (100 nodes x 8 H100s, 800 pods). kube-scheduler (Kubernetes' own allocator)
schedules them in one run, gpudra's stand-in scheduler in the other; the ratio is real / stand-in time. Then the
64-tray ComputeDomain of bench/computedomain.py on the real control plane.

Needs the binaries of ``make kubernetes``.

Each run splits the pods' waits into claim creation, scheduling and binding, and bound to Running, with the CPU of
each process and gpudra's share (its NodePrepareResources time over the pods' creation-to-Running time). A third run
raises kube-scheduler's and kube-controller-manager's client QPS (defaults 50 and 20) to show which limits, and the
ComputeDomain runs a second time with them raised too.

    python -m bench kubernetes [--quick] [--nodes N] [--qps Q] [--skip-computedomain]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import resource
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bench.computedomain import GPUS_PER_TRAY, _line, in_fresh_process, plane_cpu
from bench.computedomain import Result as DomainResult
from bench.goals import at_most
from gpudra.cluster.fleet import parse_fleet
from gpudra.cluster.up import EmbeddedCluster, UpOptions
from gpudra.kube.informer import Informer
from gpudra.kube.resources import PODS, RESOURCE_CLAIM_TEMPLATES
from gpudra.telemetry import configure_logging

NS = "default"
ControlPlaneKind = Literal["embedded", "kubernetes"]


def template() -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"bench-{i:04d}", "namespace": NS, "labels": {"app": "bench"}},
        "spec": {
            "containers": [{"name": "main", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        },
    }


PHASES = ("claim", "schedule", "start")
"""Each pod's wait, split: its claim created from the template (kube-controller-manager, or the stand-in's claim
controller), then scheduled and bound (kube-scheduler, or the stand-in), then from bound to Running (the kubelet,
and gpudra's NodePrepareResources)."""


@dataclass
class Result:
    control_plane: str
    nodes: int
    pods: int
    start_s: float
    bound_s: float
    """Until every pod was bound to a node (scheduling, claims from templates)."""
    running_s: float
    """Until every pod was Running (its kubelet prepared its claim through the node's agent)."""
    qps: float | None = None
    phases: dict[str, list[float]] = field(default_factory=dict)
    """Per phase (``PHASES``), each pod's seconds in it."""
    waited_s: float = 0.0
    """The pods' waits summed: creation to Running."""
    prepare_s: float = 0.0
    """gpudra's NodePrepareResources time summed over the pods (gpudra_prepare_seconds)."""
    cpu_s: dict[str, float] = field(default_factory=dict)
    """CPU seconds during the run: this process (gpudra's agents and controller, the simulated nodes' kubelets,
    and, embedded, the API server and stand-ins) and each real control-plane process."""

    @property
    def pods_per_second(self) -> float:
        return self.pods / self.running_s

    @property
    def gpudra_share(self) -> float:
        """gpudra's part of the pods' waits."""
        return self.prepare_s / self.waited_s if self.waited_s else 0.0


def _cpu_now(cluster: EmbeddedCluster) -> dict[str, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"this process": usage.ru_utime + usage.ru_stime, **plane_cpu(cluster)}


def _prepared_seconds(cluster: EmbeddedCluster) -> float:
    return sum(
        s.value
        for metric in cluster.metrics.registry.collect()
        if metric.name == "gpudra_prepare_seconds"
        for s in metric.samples
        if s.name == "gpudra_prepare_seconds_sum"
    )


async def schedule(
    control_plane: ControlPlaneKind, nodes: int, qps: float | None = None, timeout: float = 600.0
) -> Result:
    pods = nodes * 8
    with tempfile.TemporaryDirectory(prefix="gpudra-bench-") as tmp:
        began = time.perf_counter()
        cluster = EmbeddedCluster(
            UpOptions(
                nodes=parse_fleet(f"dgx-h100:{nodes}", {"dgx-h100"}),
                kubeconfig=Path(tmp) / "kubeconfig",
                hardware_poll_seconds=5.0,
                control_plane=control_plane,
                control_plane_qps=qps,
                ready_timeout=600,
            )
        )
        await cluster.start()
        started = time.perf_counter() - began
        try:
            assert cluster.client is not None
            client = cluster.client
            at: dict[str, dict[str, float]] = {"created": {}, "claimed": {}, "bound": {}, "running": {}}
            marks: dict[str, float] = {}
            done = asyncio.Event()

            async def seen(kind: str, body: dict[str, Any]) -> None:
                if kind == "DELETED":
                    return
                name, now = body["metadata"]["name"], time.perf_counter()
                status = body.get("status") or {}
                if status.get("resourceClaimStatuses"):
                    at["claimed"].setdefault(name, now)
                if body["spec"].get("nodeName"):
                    at["bound"].setdefault(name, now)
                if status.get("phase") == "Running":
                    at["running"].setdefault(name, now)
                if len(at["bound"]) == pods:
                    marks.setdefault("bound", now)
                if len(at["running"]) == pods:
                    done.set()

            informer = Informer(client, PODS, seen, label_selector="app=bench")
            watching = asyncio.create_task(informer.run())
            await informer.synced.wait()
            await client.create(RESOURCE_CLAIM_TEMPLATES, template(), NS)
            gate = asyncio.Semaphore(16)

            async def create(i: int) -> None:
                async with gate:
                    await client.create(PODS, pod(i), NS)
                    at["created"][pod(i)["metadata"]["name"]] = time.perf_counter()

            prepared_before, cpu_before = _prepared_seconds(cluster), _cpu_now(cluster)
            start = time.perf_counter()
            await asyncio.gather(*(create(i) for i in range(pods)))
            try:
                await asyncio.wait_for(done.wait(), timeout)
            finally:
                watching.cancel()
            end = time.perf_counter()
            cpu_after = _cpu_now(cluster)
            result = Result(
                control_plane, nodes, pods, started, marks.get("bound", end) - start, end - start, qps
            )
            names = list(at["created"])
            # a pod can be seen bound and claimed in one event: a phase never goes below zero
            claimed = {n: max(at["created"][n], at["claimed"].get(n, at["bound"][n])) for n in names}
            bound = {n: max(claimed[n], at["bound"][n]) for n in names}
            result.phases = {
                "claim": [claimed[n] - at["created"][n] for n in names],
                "schedule": [bound[n] - claimed[n] for n in names],
                "start": [max(at["running"][n], bound[n]) - bound[n] for n in names],
            }
            result.waited_s = sum(at["running"][n] - at["created"][n] for n in names)
            result.prepare_s = _prepared_seconds(cluster) - prepared_before
            result.cpu_s = {k: cpu_after[k] - cpu_before.get(k, 0.0) for k in cpu_after}
            return result
        finally:
            await cluster.stop()


def measure(control_plane: ControlPlaneKind, nodes: int, qps: float | None = None) -> Result:
    configure_logging(level="ERROR")
    return asyncio.run(schedule(control_plane, nodes, qps))


def fresh(control_plane: ControlPlaneKind, nodes: int, qps: float | None = None) -> Result:
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(measure, control_plane, nodes, qps).result()


def _pods_line(r: Result) -> str:
    name = r.control_plane if r.qps is None else f"{r.control_plane} (client QPS {r.qps:g})"
    return (
        f"{name:<10} {r.pods:>4} pods on {r.nodes:>3} nodes: all bound in {r.bound_s:6.2f} s, "
        f"all Running in {r.running_s:6.2f} s "
        f"({r.pods_per_second:6.1f} pods/s; the cluster started in {r.start_s:5.1f} s)"
    )


def _split_lines(r: Result) -> list[str]:
    """Where each pod's wait went, and gpudra's share of it."""
    parts = ", ".join(
        f"{phase} median {statistics.median(times):.2f} s p99 {_p99(times):.2f} s"
        for phase, times in r.phases.items()
    )
    cpu = ", ".join(
        f"{name} {seconds:.1f} s" for name, seconds in sorted(r.cpu_s.items(), key=lambda i: -i[1])
    )
    share = (
        f"  gpudra's share of the pods' waits (its NodePrepareResources time / creation-to-Running): "
        f"{100 * r.gpudra_share:.1f}% ({r.prepare_s:.1f} of {r.waited_s:.0f} pod-seconds); "
    )
    if r.control_plane == "kubernetes":
        share += at_most(100 * r.gpudra_share, 10, "%")
    else:  # the stand-ins wait for nothing, so the prepares are most of what is left of a pod's wait
        share += "reported beside (the goal is the real control plane's)"
    return [f"  per pod: {parts}", f"  CPU during the run: {cpu}", share]


def _p99(times: list[float]) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench kubernetes", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100, help="dgx-h100 nodes (8 pods each)")
    parser.add_argument("--trays", type=int, default=64, help="GB200 trays of the ComputeDomain run")
    parser.add_argument("--quick", action="store_true", help="20 nodes, 16 trays")
    parser.add_argument("--skip-computedomain", action="store_true")
    parser.add_argument(
        "--qps",
        type=float,
        default=None if "--quick" in (argv or []) else 200.0,
        help=(
            "a third run, and a second ComputeDomain, with kube-scheduler's and kube-controller-manager's client "
            "QPS raised to this (0: none)"
        ),
    )
    args = parser.parse_args(argv)
    nodes, trays = (20, 16) if args.quick else (args.nodes, args.trays)
    stand_in = fresh("embedded", nodes)
    print(_pods_line(stand_in), flush=True)
    print("\n".join(_split_lines(stand_in)), flush=True)
    real = fresh("kubernetes", nodes)
    print(_pods_line(real), flush=True)
    print("\n".join(_split_lines(real)), flush=True)
    if args.qps:
        raised = fresh("kubernetes", nodes, args.qps)
        print(_pods_line(raised), flush=True)
        print("\n".join(_split_lines(raised)), flush=True)
    print(
        f"kube-scheduler / stand-in scheduler time: {real.running_s / stand_in.running_s:.2f} "
        f"(kube-scheduler {real.pods_per_second:.1f} pods/s, stand-in {stand_in.pods_per_second:.1f} pods/s)",
        flush=True,
    )
    if args.skip_computedomain:
        return
    domain = in_fresh_process(trays, False, "kubernetes")
    print(_line("real", domain), flush=True)
    print("\n".join(_domain_lines(domain)), flush=True)
    print(_claim_controller_floor(domain), flush=True)
    if args.qps:
        raised_domain = in_fresh_process(trays, False, "kubernetes", args.qps)
        print(_line(f"real, QPS {args.qps:.0f}", raised_domain), flush=True)
        print("\n".join(_domain_lines(raised_domain)), flush=True)


KCM_QPS, KCM_BURST = 20, 30
"""kube-controller-manager's default client rate, which each of its controllers has to itself."""


def _claim_controller_floor(r: DomainResult) -> str:
    """How long kube-controller-manager's resourceclaim controller needs at its default rate, whatever the driver:
    one claim POST and one pod status PATCH for each pod with a claim from a template (the job's and the daemons')."""
    requests = 2 * (r.pods + r.trays)
    floor = (requests - KCM_BURST) / KCM_QPS
    return (
        f"  kube-controller-manager's floor at its default client QPS: {requests} resourceclaim controller requests "
        f"at {KCM_QPS}/s (burst {KCM_BURST}) take at least {floor:.1f} s; under the goal only with the QPS raised"
    )


def _domain_lines(r: DomainResult) -> list[str]:
    """The ComputeDomain on the real control plane against its goals (issue #38), and where its time went."""
    done = max(r.prepared_s, r.ready_s)
    redone = r.clique_conflicts / max(r.trays, 1)
    return [
        f"ComputeDomain on the real control plane: {r.pods} pods ({GPUS_PER_TRAY} per tray) over {r.trays} trays "
        f"Ready and prepared in {done:.2f} s (load average {os.getloadavg()[0]:.1f}); "
        + at_most(done, 25, "s"),
        f"  409 conflicts on the domain {r.conflicts}; " + at_most(r.conflicts, 0, "conflicts"),
        f"  redone clique writes (409s and failed patch tests) {redone:.2f} per daemon; "
        + at_most(redone, 1, "per daemon"),
        f"  where the time went: every pod bound at {r.bound_s:.2f} s (claims from the templates: "
        f"kube-controller-manager; binding: kube-scheduler), then {done - r.bound_s:.2f} s until all Ready and "
        f"prepared (the daemons' pods created, scheduled, prepared and registered; the channels prepared)",
    ]


if __name__ == "__main__":
    main()
