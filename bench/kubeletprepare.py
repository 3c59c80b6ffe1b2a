"""NodePrepareResources and NodeUnprepareResources latency as a real kubelet times it, on kube-apiserver.

``gpudra up --control-plane kubernetes --real-kubelet 1``: one simulated dgx-h100 whose kubelet is Kubernetes'
own (of the control plane's version, over its fake container runtime), gpudra's agent serving it. Rounds of 8
pods, each claiming one whole GPU from a template, are created at once, run, and are deleted at once; the
kubelet makes one call per pod when it starts and one when it stops it (a pod is gone only once its kubelet has
unprepared its claim and let it go).

The kubelet's own histogram (``dra_grpc_operations_duration_seconds``) starts at 100 ms, too coarse for these
calls. Its log is not: gpudra's real kubelets log ``dra_plugin.go`` at level 4, a line when the kubelet calls
the plugin and one when the answer is back, each with its claims' UIDs and a microsecond time. The time between
the two lines of the same claims is the call as the kubelet sees it: gRPC over the socket both ways and the
agent's prepare.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from bench.agentkit import percentile
from bench.kubernetes import pod, template
from gpudra.cluster.fleet import parse_fleet
from gpudra.cluster.up import EmbeddedCluster, UpOptions
from gpudra.kube.informer import Informer
from gpudra.kube.resources import PODS, RESOURCE_CLAIM_TEMPLATES
from gpudra.telemetry import configure_logging

NS = "default"
PODS_PER_ROUND = 8  # a dgx-h100's GPUs
KLOG = re.compile(
    r"^[IWEF](\d{4} \d{2}:\d{2}:\d{2}\.\d{6})\s+\d+ dra_plugin\.go:\d+\] \"(Calling|Done calling) (\w+) rpc\""
)
UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
METHODS = {"NodePrepareResources": "prepare", "NodeUnprepareResources": "unprepare"}


def call_durations(lines: Iterable[str], year: int) -> dict[str, list[float]]:
    """Seconds of each call the kubelet logged, by ``prepare`` / ``unprepare``: a "Calling" line paired with the
    next "Done calling" line of the same method and claims."""
    waiting: dict[tuple[str, frozenset[str]], list[datetime]] = {}
    durations: dict[str, list[float]] = {"prepare": [], "unprepare": []}
    for line in lines:
        found = KLOG.match(line)
        if found is None:
            continue
        stamp, phase, method = found.groups()
        # The kubelet names the unprepare method NodeUnprepareResource (no s) in its "Calling" line
        verb = METHODS.get(method) or METHODS.get(method + "s")
        if verb is None:
            continue
        at = datetime.strptime(f"{year}{stamp}", "%Y%m%d %H:%M:%S.%f")
        payload = line.partition(' request="')[2] or line.partition(' response="')[2]
        key = (verb, frozenset(UID.findall(payload)))
        if phase == "Calling":
            waiting.setdefault(key, []).append(at)
        elif waiting.get(key):
            durations[verb].append((at - waiting[key].pop(0)).total_seconds())
    return durations


def _pod(round_no: int, i: int) -> dict[str, Any]:
    """bench kubernetes' pod of one GPU, named for its round; a second's grace, so that the kubelet stops it."""
    body = pod(i)
    body["metadata"].update(name=f"kp-{round_no}-{i}", labels={"app": "kubelet-prepare"})
    body["spec"]["terminationGracePeriodSeconds"] = 1
    return body


async def measure(rounds: int, timeout: float = 120.0) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="gpudra-bench-") as tmp:
        cluster = EmbeddedCluster(
            UpOptions(
                nodes=parse_fleet("dgx-h100:1", {"dgx-h100"}),
                kubeconfig=Path(tmp) / "kubeconfig",
                control_plane="kubernetes",
                real_kubelets=1,
                hardware_poll_seconds=5.0,
            )
        )
        await cluster.start()
        try:
            assert cluster.client is not None
            client = cluster.client
            (kubelet,) = cluster.real_kubelets.values()
            log_file = kubelet.kubelet.log_file
            offset = log_file.stat().st_size
            running: set[str] = set()
            present: set[str] = set()
            changed = asyncio.Event()

            async def seen(kind: str, body: dict[str, Any]) -> None:
                name = body["metadata"]["name"]
                if kind == "DELETED":
                    present.discard(name)
                    running.discard(name)
                else:
                    present.add(name)
                    if (body.get("status") or {}).get("phase") == "Running":
                        running.add(name)
                changed.set()

            async def until(done: Callable[[], bool]) -> None:
                async with asyncio.timeout(timeout):
                    while not done():
                        changed.clear()
                        await changed.wait()

            informer = Informer(client, PODS, seen, label_selector="app=kubelet-prepare")
            watching = asyncio.create_task(informer.run())
            try:
                await informer.synced.wait()
                await client.create(RESOURCE_CLAIM_TEMPLATES, template(), NS)
                for round_no in range(rounds):
                    names = [f"kp-{round_no}-{i}" for i in range(PODS_PER_ROUND)]
                    await asyncio.gather(
                        *(client.create(PODS, _pod(round_no, i), NS) for i in range(len(names)))
                    )
                    await until(partial(running.issuperset, names))
                    await asyncio.gather(*(client.delete(PODS, n, NS) for n in names))
                    await until(partial(present.isdisjoint, names))
            finally:
                watching.cancel()
                await asyncio.gather(watching, return_exceptions=True)
            with log_file.open("rb") as log:
                log.seek(offset)
                text = log.read().decode(errors="replace")
            return call_durations(text.splitlines(), time.localtime().tm_year)
        finally:
            await cluster.stop()


def report(durations: dict[str, list[float]]) -> None:
    for verb in ("prepare", "unprepare"):
        samples = sorted(s * 1000 for s in durations[verb])
        if not samples:
            print(f"{verb} whole GPU through the real kubelet: no call found in its log", flush=True)
            continue
        print(
            f"{verb} whole GPU through the real kubelet (kube-apiserver), {PODS_PER_ROUND} pods at once: "
            f"p50 {percentile(samples, 0.5):.1f} ms, p99 {percentile(samples, 0.99):.1f} ms "
            f"({len(samples)} calls, as the kubelet timed them)",
            flush=True,
        )


def run(rounds: int) -> None:
    configure_logging(level="ERROR")
    report(asyncio.run(measure(rounds)))
