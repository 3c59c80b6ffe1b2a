"""The real control plane against the embedded one, end to end: pods with one GPU claim each, from creation to
Running, on the same simulated fleet (100 nodes x 8 H100s, 800 pods). kube-scheduler (Kubernetes' own allocator)
schedules them in one run, gpudra's stand-in scheduler in the other; the ratio is real / stand-in time. Then the
64-tray ComputeDomain of bench/computedomain.py on the real control plane.

Needs the binaries of ``make kubernetes``.

    python -m bench kubernetes [--quick] [--nodes N] [--skip-computedomain]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from bench.computedomain import GPUS_PER_TRAY, _line, in_fresh_process
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

    @property
    def pods_per_second(self) -> float:
        return self.pods / self.running_s


async def schedule(control_plane: ControlPlaneKind, nodes: int, timeout: float = 600.0) -> Result:
    pods = nodes * 8
    with tempfile.TemporaryDirectory(prefix="gpudra-bench-") as tmp:
        began = time.perf_counter()
        cluster = EmbeddedCluster(
            UpOptions(
                nodes=parse_fleet(f"dgx-h100:{nodes}", {"dgx-h100"}),
                kubeconfig=Path(tmp) / "kubeconfig",
                hardware_poll_seconds=5.0,
                control_plane=control_plane,
                ready_timeout=600,
            )
        )
        await cluster.start()
        started = time.perf_counter() - began
        try:
            assert cluster.client is not None
            client = cluster.client
            running: set[str] = set()
            bound: set[str] = set()
            marks: dict[str, float] = {}
            done = asyncio.Event()

            async def seen(kind: str, body: dict[str, Any]) -> None:
                if kind != "DELETED" and body["spec"].get("nodeName"):
                    bound.add(body["metadata"]["name"])
                if kind != "DELETED" and (body.get("status") or {}).get("phase") == "Running":
                    running.add(body["metadata"]["name"])
                if len(bound) == pods:
                    marks.setdefault("bound", time.perf_counter())
                if len(running) == pods:
                    done.set()

            informer = Informer(client, PODS, seen, label_selector="app=bench")
            watching = asyncio.create_task(informer.run())
            await informer.synced.wait()
            await client.create(RESOURCE_CLAIM_TEMPLATES, template(), NS)
            gate = asyncio.Semaphore(16)

            async def create(i: int) -> None:
                async with gate:
                    await client.create(PODS, pod(i), NS)

            start = time.perf_counter()
            await asyncio.gather(*(create(i) for i in range(pods)))
            try:
                await asyncio.wait_for(done.wait(), timeout)
            finally:
                watching.cancel()
            end = time.perf_counter()
            return Result(control_plane, nodes, pods, started, marks.get("bound", end) - start, end - start)
        finally:
            await cluster.stop()


def measure(control_plane: ControlPlaneKind, nodes: int) -> Result:
    configure_logging(level="ERROR")
    return asyncio.run(schedule(control_plane, nodes))


def fresh(control_plane: ControlPlaneKind, nodes: int) -> Result:
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(measure, control_plane, nodes).result()


def _pods_line(r: Result) -> str:
    return (
        f"{r.control_plane:<10} {r.pods:>4} pods on {r.nodes:>3} nodes: all bound in {r.bound_s:6.2f} s, "
        f"all Running in {r.running_s:6.2f} s "
        f"({r.pods_per_second:6.1f} pods/s; the cluster started in {r.start_s:5.1f} s)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench kubernetes", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100, help="dgx-h100 nodes (8 pods each)")
    parser.add_argument("--trays", type=int, default=64, help="GB200 trays of the ComputeDomain run")
    parser.add_argument("--quick", action="store_true", help="20 nodes, 16 trays")
    parser.add_argument("--skip-computedomain", action="store_true")
    args = parser.parse_args(argv or [])
    nodes, trays = (20, 16) if args.quick else (args.nodes, args.trays)
    stand_in = fresh("embedded", nodes)
    print(_pods_line(stand_in), flush=True)
    real = fresh("kubernetes", nodes)
    print(_pods_line(real), flush=True)
    print(
        f"kube-scheduler / stand-in scheduler time: {real.running_s / stand_in.running_s:.2f} "
        f"(kube-scheduler {real.pods_per_second:.1f} pods/s, stand-in {stand_in.pods_per_second:.1f} pods/s)",
        flush=True,
    )
    if args.skip_computedomain:
        return
    domain = in_fresh_process(trays, False, "kubernetes")
    print(_line("real", domain), flush=True)
    done = max(domain.prepared_s, domain.ready_s)
    print(
        f"ComputeDomain on the real control plane: {domain.pods} pods ({GPUS_PER_TRAY} per tray) over "
        f"{domain.trays} trays ready in {done:.2f} s, {domain.conflicts} conflicts on the domain"
    )


if __name__ == "__main__":
    main()
