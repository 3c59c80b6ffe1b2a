"""Benchmark of the web view on a 500-node simulated fleet: does the page load well under a second?

The embedded API server holds the Nodes and ResourceSlices that 500 simulated nodes' agents would publish
(dgx-h100, dgx-a100 with MIG, l4x4; built by ``gpudra.cluster.simslices``, no agents run), claims holding a
third of the GPUs and a few pending ones. The web view watches it as the controller's does. Measured, each as the
median of several runs: the first sync (list everything, draw every card), ``GET /`` (the page as a browser
fetches it, gzip), the page's load in chromium when it is installed (as the browser tests drive it), and how long
a change to one node's slice takes to reach a subscriber. The baseline, in the same run, is what
``kubectl get resourceslices -o json`` costs on the same server (a GET of the slice list), and for the browser,
chromium loading a two-byte page from the web view's own server (``/healthz``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp

from gpudra.api.crdgen import CRD_MODELS, crd_for
from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.cluster.apiserver.identity import ADMIN
from gpudra.cluster.fleet import parse_fleet
from gpudra.cluster.simslices import node_objects
from gpudra.controller.webview.server import WebViewServer
from gpudra.controller.webview.state import FleetView
from gpudra.devices.classes import load_device_classes
from gpudra.kube.client import KubeClient
from gpudra.kube.informer import Informers
from gpudra.kube.resources import CRDS, DEVICE_CLASSES, NODES, RESOURCE_CLAIMS, RESOURCE_SLICES

DRIVER = Path(__file__).resolve().parents[1] / "tests" / "browser" / "driver.mjs"
CHROMIUM = Path("/usr/bin/chromium")


def _claim(name: str, results: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                       "count": len(results) or 9}}]}},
    }  # fmt: skip


async def _fill(client: KubeClient, spec: str, pending: int) -> tuple[int, int]:
    profiles = {part.split(":")[0] for part in spec.split(",")}
    for crd in (crd_for(model) for model in CRD_MODELS):
        await client.apply_object(CRDS, crd)
    for device_class in load_device_classes():
        await client.apply_object(DEVICE_CLASSES, device_class)
    slices = 0
    held = 0
    for n, node in enumerate(parse_fleet(spec, profiles)):
        body, *published = node_objects(node)
        for obj in (body, *published):
            obj["metadata"].pop("resourceVersion", None)
            obj["metadata"].pop("uid", None)
        await client.create(NODES, body)
        for s in published:
            await client.create(RESOURCE_SLICES, s)
            slices += 1
        if n % 3 == 0:  # a claim holding the first device of every third node
            device = published[0]["spec"]["devices"][0]["name"]
            result = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": node.name, "device": device}
            created = await client.create(RESOURCE_CLAIMS, _claim(f"held-{n}", [result]), "default")
            status = {"status": {"allocation": {"devices": {"results": [result]}}}}
            await client.patch(
                RESOURCE_CLAIMS, created["metadata"]["name"], status, "default", subresource="status"
            )
            held += 1
    for i in range(pending):
        await client.create(RESOURCE_CLAIMS, _claim(f"pending-{i}", []), "default")
    return slices, held


async def _timed_get(session: aiohttp.ClientSession, url: str, **headers: str) -> tuple[float, int]:
    started = time.perf_counter()
    async with session.get(url, headers=headers) as response:
        body = await response.read()
        assert response.status == 200, response.status
    return time.perf_counter() - started, len(body)


def _have_browser() -> bool:
    return (
        shutil.which("node") is not None and CHROMIUM.exists() and (DRIVER.parent / "node_modules").is_dir()
    )


async def _browser_loads(urls: list[str], runs: int) -> list[list[float]]:
    """Chromium's load times of each URL (``runs`` each, after one unmeasured load that starts the browser)."""
    if not _have_browser():
        return []
    process = await asyncio.create_subprocess_exec(
        "node", str(DRIVER), cwd=DRIVER.parent, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert process.stdin is not None and process.stdout is not None
    loads: list[list[float]] = [[] for _ in urls]
    for run in range(runs + 1):
        for i, url in enumerate(urls):
            process.stdin.write(json.dumps({"op": "open", "url": url}).encode() + b"\n")
            answer = json.loads(await process.stdout.readline())
            if run:
                loads[i].append(answer["loadMs"] / 1000)
    process.stdin.write(b'{"op": "close"}\n')
    process.stdin.close()
    await process.wait()
    return loads


async def _update_latency(web: str, client: KubeClient, runs: int) -> list[float]:
    """Taint one device of a slice and time the update that reaches a subscriber."""
    slices, _ = await client.list_raw(RESOURCE_SLICES)
    latencies = []
    async with (
        aiohttp.ClientSession(read_bufsize=2**24) as reader,
        reader.get(f"{web}events?since=-1") as stream,
    ):
        await stream.content.readline()  # the snapshot
        for i in range(runs):
            target = slices[i * 7 % len(slices)]
            devices = target["spec"]["devices"]
            devices[0]["taints"] = [{"key": "bench", "value": str(i), "effect": "NoSchedule"}]
            started = time.perf_counter()
            await client.patch(RESOURCE_SLICES, target["metadata"]["name"], {"spec": {"devices": devices}})
            while not (await stream.content.readline()).startswith(b"data: "):
                pass
            latencies.append(time.perf_counter() - started)
    return latencies


class ThreadedWebView:
    """The web view with informers and a client of its own, in a thread and event loop of its own, as the
    controller's would be beside the API server: the bench's API server and its load run in the main loop."""

    def __init__(self, server_url: str, token: str) -> None:
        self._server_url, self._token = server_url, token
        self._started = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), name="webview", daemon=True)
        self.url = ""

    def start(self) -> str:
        self._thread.start()
        if not self._started.wait(60):
            raise TimeoutError("the web view did not start within 60 s")
        return self.url

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        client = KubeClient.for_url(
            self._server_url, token=self._token, field_manager="gpudra-webview", max_connections=None
        )
        informers = Informers(client)
        web = WebViewServer("127.0.0.1", 0, FleetView(informers, driver="gpu.nvidia.com"))
        watching = asyncio.create_task(informers.run())
        try:
            self.url = await web.start()
            self._started.set()
            await self._stop.wait()
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
            await web.stop()
            await client.close()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


async def run(spec: str, pending: int, runs: int) -> None:
    server = EmbeddedAPIServer()
    url = await server.start()
    token = server.tokens.issue(ADMIN)
    client = KubeClient.for_url(url, token=token, max_connections=None)
    web = ThreadedWebView(url, token)
    try:
        started = time.perf_counter()
        slices, held = await _fill(client, spec, pending)
        print(f"fleet {spec}: {slices} slices, {held} claims holding devices, {pending} pending "
              f"(set up in {time.perf_counter() - started:.1f} s)")  # fmt: skip
        print("set up; starting the web view", flush=True)
        started = time.perf_counter()
        page_url = await asyncio.to_thread(web.start)
        async with aiohttp.ClientSession() as session:
            _, size = await _timed_get(session, page_url)  # waits for the first sync
            print(f"first sync and page: {time.perf_counter() - started:.2f} s")
            pages = [await _timed_get(session, page_url, **{"Accept-Encoding": "gzip"}) for _ in range(runs)]
            lists = [
                await _timed_get(
                    session,
                    f"{url}/apis/resource.k8s.io/v1/resourceslices",
                    Authorization=f"Bearer {server.tokens.issue(ADMIN)}",
                )
                for _ in range(runs)
            ]
            page_s, list_s = statistics.median(p[0] for p in pages), statistics.median(x[0] for x in lists)
            loads = await _browser_loads([page_url, f"{page_url}healthz"], runs)
            latencies = await _update_latency(page_url, client, runs)
        print(f"{'measure':<44}{'median':>10}{'ratio to baseline':>20}")
        print(f"{'baseline: GET resourceslices (JSON list)':<44}{list_s * 1000:>8.0f}ms{1:>20.2f}")
        print(f"{'GET / (page, gzip; ' + str(size // 1024) + ' KiB unzipped)':<44}{page_s * 1000:>8.0f}ms"
              f"{page_s / list_s:>20.2f}")  # fmt: skip
        if loads:
            load_s, tiny_s = statistics.median(loads[0]), statistics.median(loads[1])
            print(f"{'baseline: chromium loads a 2-byte page':<44}{tiny_s * 1000:>8.0f}ms{1:>20.2f}")
            print(
                f"{'chromium: the web view (to the load event)':<44}{load_s * 1000:>8.0f}ms{load_s / tiny_s:>20.2f}"
            )
        else:
            print("chromium: not installed (make browser), page load in a browser not measured")
        update_s = statistics.median(latencies)
        print(
            f"{'a slice change reaches a subscriber':<44}{update_s * 1000:>8.0f}ms{update_s / list_s:>20.2f}"
        )
    finally:
        await asyncio.to_thread(web.stop)
        await client.close()
        await server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench webview", description=__doc__.splitlines()[0])
    parser.add_argument("--fleet", default="dgx-h100:250,dgx-a100:125,l4x4:125", help="PROFILE:COUNT,...")
    parser.add_argument(
        "--pending", type=int, default=10, help="pending claims (explained in the background)"
    )
    parser.add_argument("--runs", type=int, default=5, help="runs per measure")
    parser.add_argument("--quick", action="store_true", help="50 nodes (CI)")
    args = parser.parse_args(argv)
    fleet = "dgx-h100:25,dgx-a100:13,l4x4:12" if args.quick else args.fleet
    asyncio.run(run(fleet, args.pending, args.runs))


if __name__ == "__main__":
    main()
