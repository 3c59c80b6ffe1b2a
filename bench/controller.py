"""The controller at 1,000 nodes on kube-apiserver (issue #38 goal 5): etcd and kube-apiserver 1.37 with 1,000
dgx-h100 nodes' Node and ResourceSlice objects (8,000 GPUs, as their agents would publish them; no agents run),
gpudra's controller in a process of its own as in production, and 4,000 claims churning at 50/s for 2 minutes.

The bench plays kube-scheduler: it allocates each satisfiable claim (one GPU) as soon as it is created, writing
status.allocation as the scheduler does, and deletes the oldest claim for each new one. One claim in 20 asks for a
GPU model no node has, so it stays pending and the controller explains it once its grace period is over. So each
satisfiable claim is three claim events (added, allocated, deleted) and a pending one two.

Measured, each against its goal:

- event lag: the age of the oldest claim change the controller had not finished handling, sampled every half
  second (or, when the controller took longer than that to answer, how long it took: its event loop was busy, and
  the changes that came meanwhile waited as long). The controller counts the changes its informers handed to all
  their handlers (``gpudra_watch_events_total``, read with ``?name[]=`` so that a scrape costs little); the bench's
  own watch of claims records when it saw each change, so the controller's count says which change it was at. The
  baseline is the bench's own watch: from a claim's create request to its watch seeing it.
- the controller's peak resident memory (VmHWM), and its CPU over the churn per claim event (from /proc);
  kube-apiserver's and etcd's CPU beside it.
- explanations: halfway through, 100 unsatisfiable claims are created at once; the time from each one's end of
  grace (creation + the controller's ``pending_grace_seconds``) to its explaining Event, as the bench's watch of
  Events sees it; all 100 must be explained within 2 s.

    python -m bench controller [--quick] [--nodes N] [--alive N] [--rate R] [--seconds S] [--grace S]
        [--profile=FILE]   (the controller under cProfile)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp

from bench.computedomain import _cpu_seconds
from bench.goals import at_most
from gpudra.cluster.fleet import parse_fleet
from gpudra.cluster.kubernetes.binaries import find_binaries
from gpudra.cluster.kubernetes.bootstrap import CONTROLLER_SERVICE_ACCOUNT, apply_base, repo_manifests
from gpudra.cluster.kubernetes.controlplane import KubernetesControlPlane
from gpudra.cluster.processes import free_port
from gpudra.cluster.simslices import node_objects
from gpudra.config import ControllerSettings
from gpudra.kube.client import KubeClient
from gpudra.kube.crdready import wait_served
from gpudra.kube.resources import EVENTS, NAMESPACES, NODES, RESOURCE_CLAIMS, RESOURCE_SLICES, Resource
from gpudra.telemetry import configure_logging
from gpudra.testing import eventually

NS = "bench"
DRIVER = "gpu.nvidia.com"
GPUS_PER_NODE = 8
PENDING_EVERY = 20
"""One claim in this many asks for a GPU no node has."""
BURST = 100
SCRAPE_SECONDS = 0.5
COUNTED = "gpudra_watch_events_total"


def claim(name: str, *, pending: bool) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": DRIVER}
    if pending:
        expression = f'device.attributes["{DRIVER}"].productName == "NVIDIA B300"'
        exactly["selectors"] = [{"cel": {"expression": expression}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def allocation(node: str, device: str) -> dict[str, Any]:
    """status.allocation as kube-scheduler writes it for one whole GPU."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    result = {"request": "gpu", "driver": DRIVER, "pool": node, "device": device}
    return {
        "status": {
            "allocation": {"devices": {"results": [result]}, "nodeSelector": {"nodeSelectorTerms": [term]}}
        }
    }


@dataclass
class Result:
    nodes: int
    alive: int
    rate: float
    seconds: float
    grace_s: float
    """The controller's pending_grace_seconds."""
    published_s: float = 0.0
    fill_s: float = 0.0
    churned: int = 0
    """Claims created (and as many deleted) in the churn."""
    claim_events: int = 0
    """Claim changes the bench's watch saw during the churn."""
    lag_s: list[float] = field(default_factory=list)
    counted: tuple[int, int] = (0, 0)
    """Claim changes the controller had handled, and the bench's watch had seen, at the end."""
    own_lag_s: list[float] = field(default_factory=list)
    controller_cpu_s: float = 0.0
    plane_cpu_s: dict[str, float] = field(default_factory=dict)
    peak_rss_mib: float = 0.0
    explained_s: list[float] = field(default_factory=list)
    """Per burst claim: from the end of its grace to its Event (missing: never explained)."""
    load: tuple[float, float] = (0.0, 0.0)
    """The 1-minute load average before and after the churn."""


class Watch:
    """The bench's own watch of one kind in NS: when it saw each change, in order."""

    def __init__(self, client: KubeClient, resource: Resource) -> None:
        self.client, self.resource = client, resource
        self.seen: list[float] = []
        self.first: dict[str, float] = {}  # name (claims) or involved uid (Events) -> first seen

    async def run(self, version: str) -> None:
        while True:
            async for kind, obj in self.client.watch(self.resource, NS, resource_version=version):
                meta = obj.get("metadata") or {}
                version = str(meta.get("resourceVersion") or version)
                if kind == "BOOKMARK":
                    continue
                now = time.monotonic()
                self.seen.append(now)
                key = (obj.get("involvedObject") or {}).get("uid") or meta.get("name", "")
                self.first.setdefault(str(key), now)


def _status_kib(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return float(line.split()[1])
    return 0.0


async def _handled(session: aiohttp.ClientSession, url: str) -> int | None:
    """How many claim changes the controller has handled (None: not serving yet)."""
    try:
        async with session.get(url, params={"name[]": COUNTED}) as response:
            text = await response.text()
    except aiohttp.ClientError:
        return None
    for line in text.splitlines():
        if line.startswith(COUNTED + '{resource="resourceclaims"}'):
            return int(float(line.rsplit(" ", 1)[1]))
    return 0 if response.status == 200 else None


@contextlib.asynccontextmanager
async def controller_process(
    kubeconfig: Path, port: int, log: Path, grace: float, profile: Path | None
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``gpudra controller`` in a process of its own, as its Deployment runs it (``profile``: under cProfile,
    its statistics written there when it stops)."""
    env = {
        **os.environ,
        "GPUDRA_LOG_LEVEL": "WARNING",
        "GPUDRA_METRICS_HOST": "127.0.0.1",
        "GPUDRA_PENDING_GRACE_SECONDS": str(grace),
    }
    profiled = ["-m", "cProfile", "-o", str(profile)] if profile is not None else []
    argv = [
        *profiled,
        "-m",
        "gpudra",
        "controller",
        "--kubeconfig",
        str(kubeconfig),
        "--metrics-port",
        str(port),
    ]
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, *argv, stdout=out, stderr=asyncio.subprocess.STDOUT, env=env
        )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()


async def _ready(session: aiohttp.ClientSession, base: str, process: asyncio.subprocess.Process) -> bool:
    """Whether the controller is ready (it must not have exited)."""
    if process.returncode is not None:
        raise RuntimeError(f"the controller exited with {process.returncode}")
    with contextlib.suppress(aiohttp.ClientError):
        async with session.get(f"{base}/readyz") as response:
            return response.status == 200
    return False


async def publish(client: KubeClient, nodes: int) -> None:
    """Every node's Node and ResourceSlices, as its agent would publish them."""
    gate = asyncio.Semaphore(16)

    async def one(node_objects_: list[dict[str, Any]]) -> None:
        async with gate:
            for body in node_objects_:
                meta = body["metadata"]
                meta.pop("resourceVersion", None)
                meta.pop("uid", None)
                await client.create(NODES if body["kind"] == "Node" else RESOURCE_SLICES, body)

    fleet = parse_fleet(f"dgx-h100:{nodes}", {"dgx-h100"})
    await asyncio.gather(*(one(node_objects(n)) for n in fleet))


class Churn:
    """Claims created, allocated (the satisfiable ones) and deleted, oldest first."""

    def __init__(self, client: KubeClient, nodes: int) -> None:
        self.client = client
        self.free = deque((f"dgx-h100-{n}", f"gpu-{g}") for g in range(GPUS_PER_NODE) for n in range(nodes))
        self.alive: deque[str] = deque()
        self.held: dict[str, tuple[str, str]] = {}
        self.created: dict[str, float] = {}  # name -> when its create request went out
        self.count = 0

    async def create(self, *, pending: bool | None = None, keep: bool = False) -> str:
        self.count += 1
        name = f"c-{self.count:06d}"
        pending = self.count % PENDING_EVERY == 0 if pending is None else pending
        self.created[name] = time.monotonic()
        await self.client.create(RESOURCE_CLAIMS, claim(name, pending=pending), NS)
        if not keep:
            self.alive.append(name)
        if not pending:
            device = self.held[name] = self.free.popleft()
            await self.client.patch(RESOURCE_CLAIMS, name, allocation(*device), NS, subresource="status")
        return name

    async def delete_oldest(self) -> None:
        name = self.alive.popleft()
        await self.client.delete(RESOURCE_CLAIMS, name, NS)
        device = self.held.pop(name, None)
        if device is not None:
            self.free.append(device)


async def paced(count: int, rate: float, step: Any) -> float:
    """Run ``step()`` ``count`` times at ``rate`` per second (at most 32 at once); the seconds it took."""
    gate = asyncio.Semaphore(32)
    began = time.monotonic()

    async def one(i: int) -> None:
        await asyncio.sleep(max(0.0, began + i / rate - time.monotonic()))
        async with gate:
            await step()

    await asyncio.gather(*(one(i) for i in range(count)))
    return time.monotonic() - began


async def measure(
    nodes: int, alive: int, rate: float, seconds: float, grace: float, profile: Path | None = None
) -> Result:
    result = Result(nodes, alive, rate, seconds, grace)
    with tempfile.TemporaryDirectory(prefix="gpudra-bench-controller-") as tmp:
        plane = KubernetesControlPlane(Path(tmp) / "kubernetes", find_binaries(), scheduling=False)
        try:
            await plane.start()
            await _run(plane, Path(tmp), result, profile)
        finally:
            await plane.stop()
    return result


async def _run(plane: KubernetesControlPlane, tmp: Path, result: Result, profile: Path | None) -> None:
    admin = plane.admin_kubeconfig
    client = await KubeClient.from_environment(admin, field_manager="bench")
    tasks: list[asyncio.Task[None]] = []
    try:
        applied = await apply_base(admin, repo_manifests())
        crds = [o["metadata"]["name"] for o in applied.objects if o["kind"] == "CustomResourceDefinition"]
        await wait_served(client, crds)
        namespace = ControllerSettings().namespace
        kubeconfig = await plane.service_account_kubeconfig(
            client, namespace, CONTROLLER_SERVICE_ACCOUNT, who="gpudra-controller"
        )
        await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        began = time.monotonic()
        await publish(client, result.nodes)
        result.published_s = time.monotonic() - began
        claims, events = Watch(client, RESOURCE_CLAIMS), Watch(client, EVENTS)
        for watch in (claims, events):
            _, version = await client.list_raw(watch.resource, NS)
            tasks.append(asyncio.create_task(watch.run(version)))
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        async with (
            controller_process(kubeconfig, port, tmp / "controller.log", result.grace_s, profile) as process,
            aiohttp.ClientSession(trust_env=False) as session,
        ):
            await eventually(
                partial(_ready, session, base, process), 120, interval=0.2, what="controller ready"
            )
            await _churn(client, session, f"{base}/metrics", process.pid, plane, claims, events, result)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.close()


async def _churn(
    client: KubeClient,
    session: aiohttp.ClientSession,
    metrics: str,
    pid: int,
    plane: KubernetesControlPlane,
    claims: Watch,
    events: Watch,
    result: Result,
) -> None:
    churn = Churn(client, result.nodes)
    result.fill_s = await paced(result.alive, 1_000.0, churn.create)

    async def caught_up() -> bool:  # the controller has handled every change the bench's watch has seen
        return (await _handled(session, metrics) or 0) >= len(claims.seen)

    await eventually(caught_up, 120, interval=SCRAPE_SECONDS, what="the controller caught up after the fill")
    first_event = len(claims.seen)
    processes = {"kube-apiserver": plane.apiserver, "etcd": plane.etcd}
    pids = {name: m.process.pid for name, m in processes.items() if m is not None and m.process is not None}
    cpu_before = _cpu_seconds(pid)
    plane_before = {name: _cpu_seconds(p) for name, p in pids.items()}
    result.load = (os.getloadavg()[0], 0.0)
    done = asyncio.Event()

    async def sample() -> None:
        while not done.is_set():
            asked = time.monotonic()
            handled = await _handled(session, metrics)
            now = time.monotonic()
            if handled is not None:
                behind = claims.seen[handled] if handled < len(claims.seen) else now
                # a controller whose event loop was busy answers late: changes that came meanwhile waited as long
                result.lag_s.append(max(0.0, now - behind, now - asked))
            await asyncio.sleep(SCRAPE_SECONDS)

    async def step() -> None:
        await asyncio.gather(churn.create(), churn.delete_oldest())

    burst: list[str] = []

    async def burst_later() -> None:
        await asyncio.sleep(result.seconds / 2)
        burst.extend(await asyncio.gather(*(churn.create(pending=True, keep=True) for _ in range(BURST))))

    sampler = asyncio.create_task(sample())
    count = int(result.rate * result.seconds)
    _, took = await asyncio.gather(burst_later(), paced(count, result.rate, step))
    result.churned = count
    # the burst's explanations may come after the churn: until then the controller's CPU still counts
    uids = {}
    for name in burst:
        uids[name] = str((await client.get_raw(RESOURCE_CLAIMS, name, NS))["metadata"]["uid"])
    with contextlib.suppress(AssertionError):  # those never explained are counted as such
        await eventually(lambda: all(u in events.first for u in uids.values()), result.grace_s + 60)
    done.set()
    await sampler
    result.counted = (await _handled(session, metrics) or 0, len(claims.seen))
    result.claim_events = len(claims.seen) - first_event
    result.controller_cpu_s = _cpu_seconds(pid) - cpu_before
    result.plane_cpu_s = {name: _cpu_seconds(p) - plane_before[name] for name, p in pids.items()}
    result.peak_rss_mib = _status_kib(pid, "VmHWM") / 1024
    result.load = (result.load[0], os.getloadavg()[0])
    result.seconds = took
    result.explained_s = [
        events.first[uid] - churn.created[name] - result.grace_s
        for name, uid in uids.items()
        if uid in events.first
    ]
    result.own_lag_s = [claims.first[name] - at for name, at in churn.created.items() if name in claims.first]


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def lines(r: Result) -> list[str]:
    per_event_ms = 1000 * r.controller_cpu_s / max(r.claim_events, 1)
    plane = ", ".join(f"{name} {cpu:.1f} s" for name, cpu in r.plane_cpu_s.items())
    worst = max(r.explained_s) if len(r.explained_s) == BURST else float("inf")
    return [
        f"{r.nodes} nodes ({r.nodes * GPUS_PER_NODE:,} GPUs) published in {r.published_s:.1f} s; {r.alive:,} claims "
        f"created and allocated in {r.fill_s:.1f} s; then {r.churned:,} created and as many deleted in "
        f"{r.seconds:.1f} s ({r.churned / r.seconds:.1f}/s), {r.claim_events:,} claim events "
        f"(load average {r.load[0]:.1f} before, {r.load[1]:.1f} after)",
        f"  controller event lag p50 {statistics.median(r.lag_s):.3f} s p99 {_quantile(r.lag_s, 0.99):.3f} s "
        f"({len(r.lag_s)} samples; the bench's own watch, create to seen: p50 "
        f"{statistics.median(r.own_lag_s):.3f} s p99 {_quantile(r.own_lag_s, 0.99):.3f} s; at the end the "
        f"controller had handled {r.counted[0]:,} of the {r.counted[1]:,} changes the bench saw); "
        + at_most(_quantile(r.lag_s, 0.99), 1, "s"),
        f"  controller peak RSS {r.peak_rss_mib:.0f} MiB; " + at_most(r.peak_rss_mib, 500, "MiB"),
        f"  controller CPU {r.controller_cpu_s:.1f} s, {per_event_ms:.3f} ms per claim event (beside it: {plane}); "
        + at_most(per_event_ms, 0.3, "ms"),
        f"  {len(r.explained_s)} of {BURST} burst claims explained, from the end of their "
        f"{r.grace_s:g} s grace: median {statistics.median(r.explained_s or [float('nan')]):.2f} s, "
        f"last {worst:.2f} s; " + at_most(worst, 2, "s"),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench controller", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--alive", type=int, default=4_000, help="claims kept alive")
    parser.add_argument("--rate", type=float, default=50.0, help="claims created (and deleted) per second")
    parser.add_argument("--seconds", type=float, default=120.0, help="how long the churn runs")
    parser.add_argument(
        "--grace",
        type=float,
        default=ControllerSettings().pending_grace_seconds,
        help="the controller's pending grace period (its default unless --quick)",
    )
    parser.add_argument(
        "--profile", type=Path, default=None, help="run the controller under cProfile, to here"
    )
    parser.add_argument("--quick", action="store_true", help="20 nodes, 80 claims, 6 s, a 2 s grace")
    args = parser.parse_args(argv)
    if args.quick:
        args.nodes, args.alive, args.seconds, args.grace = 20, 80, 6.0, 2.0
    configure_logging(level="ERROR")
    result = asyncio.run(measure(args.nodes, args.alive, args.rate, args.seconds, args.grace, args.profile))
    print("\n".join(lines(result)), flush=True)


if __name__ == "__main__":
    main()
