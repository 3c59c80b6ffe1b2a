"""Benchmark of the embedded API server: does it stay fast as objects pile up?

Creates ``--objects`` objects (Nodes, then ResourceSlices and Pods on them), interleaving with each create a
GET of a random existing object and, every 5th create, a LIST of one node's ResourceSlices by field selector,
while a watch on pods measures write-to-event latency. Prints requests/s and latency for the first and the
last window of requests and the ratio last/first (about 1.0 means no slowdown as the store grows).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from typing import Any

import aiohttp

from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.cluster.apiserver.identity import ADMIN

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
PODS = "/api/v1/namespaces/default/pods"


def _slice(name: str, node: str) -> dict[str, Any]:
    devices = [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in range(8)]
    pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
    return {
        "metadata": {"name": name},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": node, "pool": pool, "devices": devices},
    }


class Recorder:
    def __init__(self) -> None:
        self.durations: dict[str, list[float]] = {}

    async def timed(self, kind: str, call: Any) -> Any:
        start = time.perf_counter()
        async with call as rsp:
            body = await rsp.read()
            if rsp.status >= 300:
                raise RuntimeError(f"{kind}: HTTP {rsp.status}: {body[:200]!r}")
        self.durations.setdefault(kind, []).append(time.perf_counter() - start)
        return body


def _rate(durations: list[float]) -> float:
    return len(durations) / sum(durations) if durations else 0.0


async def _watch_pods(
    session: aiohttp.ClientSession, sent: dict[str, float], latencies: list[float], ready: asyncio.Event
) -> None:
    async with session.get(f"{PODS}?watch=true&resourceVersion=0&timeoutSeconds=3600") as rsp:
        ready.set()
        async for line in rsp.content:
            arrived = time.perf_counter()
            marker = b'"name":"pod-'
            at = line.find(marker)
            if at < 0 or not line.startswith(b'{"type":"ADDED"'):
                continue
            end = line.index(b'"', at + len(marker))
            name = line[at + len(marker) - 4 : end].decode()
            if name in sent:
                latencies.append(arrived - sent.pop(name))


async def run(objects: int, nodes: int, window: int) -> None:
    server = EmbeddedAPIServer()
    url = await server.start()
    rec = Recorder()
    sent: dict[str, float] = {}
    latencies: list[float] = []
    rng = random.Random(7)
    created: list[str] = []
    started = time.perf_counter()
    async with aiohttp.ClientSession(
        base_url=url,
        connector=aiohttp.TCPConnector(limit=4),
        headers={"Authorization": f"Bearer {server.tokens.issue(ADMIN)}"},
    ) as session:
        ready = asyncio.Event()
        watcher = asyncio.create_task(_watch_pods(session, sent, latencies, ready))
        await ready.wait()
        node_names = [f"node-{i:04d}" for i in range(nodes)]
        for name in node_names:
            await rec.timed("node", session.post("/api/v1/nodes", json={"metadata": {"name": name}}))
            created.append(f"/api/v1/nodes/{name}")
        for i in range(objects - nodes):
            node = node_names[i % nodes]
            if i % 2 == 0:
                name = f"{node}-gpu-{i}"
                await rec.timed("create", session.post(SLICES, json=_slice(name, node)))
                created.append(f"{SLICES}/{name}")
            else:
                name = f"pod-{i}"
                body = {
                    "metadata": {"name": name},
                    "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
                }
                sent[name] = time.perf_counter()
                await rec.timed("create", session.post(PODS, json=body))
                created.append(f"{PODS}/{name}")
            await rec.timed("get", session.get(rng.choice(created)))
            if i % 5 == 0:
                selector = {"fieldSelector": f"spec.nodeName={rng.choice(node_names)}"}
                await rec.timed("list", session.get(SLICES, params=selector))
        await asyncio.sleep(0.2)
        watcher.cancel()
    await server.stop()
    total = time.perf_counter() - started
    print(f"embedded API server: {objects} objects ({nodes} nodes), {total:.1f} s in all")
    print(f"{'request':<28}{'count':>7}{'first req/s':>13}{'last req/s':>12}{'last/first':>12}")
    rows = (("create", "create slice or pod"), ("get", "get"), ("list", "list fieldSelector nodeName"))
    for kind, label in rows:
        d = rec.durations[kind]
        first, last = _rate(d[:window]), _rate(d[-window:])
        print(f"{label:<28}{len(d):>7}{first:>13.0f}{last:>12.0f}{last / first:>12.2f}")
    if latencies:
        first_ms = statistics.median(latencies[:window]) * 1000
        last_ms = statistics.median(latencies[-window:]) * 1000
        print(
            f"{'watch latency median (ms)':<28}{len(latencies):>7}{first_ms:>13.2f}{last_ms:>12.2f}"
            f"{last_ms / first_ms:>12.2f}"
        )
    print("ratios near 1.00: no slowdown as the store grows (rates: higher is better; latency: lower).")
    print("LIST answers grow during the run (a node's slices go from ~1 to ~10); Python's cyclic GC costs")
    print("more as the heap grows: an embedding process may raise gc thresholds or gc.freeze() after setup.")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench apiserver", description=__doc__)
    parser.add_argument("--objects", type=int, default=10_000, help="objects to create (default 10000)")
    parser.add_argument("--nodes", type=int, default=500, help="nodes among them (default 500)")
    parser.add_argument(
        "--window", type=int, default=1_000, help="requests per measured window (default 1000)"
    )
    parser.add_argument("--quick", action="store_true", help="2,000 objects on 100 nodes, windows of 200")
    args = parser.parse_args(argv)
    if args.quick:
        asyncio.run(run(2_000, 100, 200))
    else:
        asyncio.run(run(args.objects, args.nodes, args.window))


if __name__ == "__main__":
    main()
