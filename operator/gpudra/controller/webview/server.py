"""HTTP of the web view: ``GET /`` (the page as it is now), ``GET /events`` (server-sent events, one per new
version: the fragments that changed), ``GET /healthz``. Read-only: nothing here writes to the cluster.

It runs in a thread of its own, with its own event loop and client: the controller's kopf treats every task
created in its loop after it starts as its own (and waits on open connections when it stops), and explaining
pending claims on a large fleet is CPU work that must not delay the controller's handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from dataclasses import asdict
from pathlib import Path

from aiohttp import web

from gpudra.controller.webview import html
from gpudra.controller.webview.state import FleetView
from gpudra.controller.webview.updates import Update
from gpudra.errors import ConfigurationError
from gpudra.kube.client import KubeClient
from gpudra.telemetry import get_logger

log = get_logger(__name__)

KEEPALIVE_SECONDS = 15.0
"""A comment line on an idle stream, so proxies (kubectl port-forward, ingresses) keep it open."""


FIRST_SYNC_SECONDS = 10.0
"""How long the page waits for the first listing of the cluster before it is served as far as it got."""


def webview_app(view: FleetView) -> web.Application:
    async def page(request: web.Request) -> web.Response:
        with contextlib.suppress(
            TimeoutError
        ):  # a first visit right after start: the fleet, not a blank page
            await asyncio.wait_for(view.ready.wait(), FIRST_SYNC_SECONDS)
        response = web.Response(
            text=html.page(view.feed.sections, view.feed.version),
            content_type="text/html",
            headers={"Cache-Control": "no-store"},
        )
        response.enable_compression()
        return response

    async def events(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-store",
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)
        since = request.headers.get("Last-Event-ID") or request.query.get("since", "")
        sent = int(since) if since.isdigit() else -1

        async def send(update: Update) -> None:
            nonlocal sent
            if update.version <= sent:
                return
            data = json.dumps(asdict(update), separators=(",", ":"))
            await response.write(f"id: {update.version}\ndata: {data}\n\n".encode())
            sent = update.version

        with view.feed.subscribe() as queue, contextlib.suppress(ConnectionResetError):
            if sent != view.feed.version:
                await send(view.feed.snapshot())
            while True:
                try:
                    update = await asyncio.wait_for(queue.get(), timeout=KEEPALIVE_SECONDS)
                except TimeoutError:
                    await response.write(b": keep-alive\n\n")
                    continue
                await send(view.feed.snapshot() if update is None else update)
        return response

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok") if view.ready.is_set() else web.Response(status=503, text="syncing")

    app = web.Application()
    app.router.add_get("/", page)
    app.router.add_get("/events", events)
    app.router.add_get("/healthz", healthz)
    return app


class WebViewServer:
    """The web view in its own thread: ``start()`` returns its URL once it listens; ``stop()`` ends it."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        driver: str,
        namespace: str = "gpudra",
        kubeconfig: Path | None = None,
    ) -> None:
        self._host, self._port = host, port
        self._driver, self._namespace = driver, namespace
        self._kubeconfig = kubeconfig
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self.url = ""

    def start(self, timeout: float = 30.0) -> str:
        self._thread = threading.Thread(
            target=asyncio.run, args=(self._main(),), name="gpudra-webview", daemon=True
        )
        self._thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError(f"the web view did not start within {timeout:.0f}s")
        if isinstance(self._error, OSError):
            where = f"{self._host}:{self._port}"
            raise ConfigurationError(f"the web view cannot listen on {where}: {self._error}") from self._error
        if self._error is not None:
            raise self._error
        return self.url

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        client: KubeClient | None = None
        runner: web.AppRunner | None = None
        try:
            client = await KubeClient.from_environment(self._kubeconfig, field_manager="gpudra-webview")
            view = FleetView(client, driver=self._driver, namespace=self._namespace)
            runner = web.AppRunner(webview_app(view), access_log=None, shutdown_timeout=1.0)
            await runner.setup()
            site = web.TCPSite(runner, self._host, self._port)
            await site.start()
            port = runner.addresses[0][1]
            self.url = f"http://{'127.0.0.1' if self._host in ('0.0.0.0', '') else self._host}:{port}/"
            watching = asyncio.create_task(view.run())
        except BaseException as exc:
            self._error = exc
            self._started.set()
            if runner is not None:
                await runner.cleanup()
            if client is not None:
                await client.close()
            return
        self._started.set()
        log.info("web view serving", url=self.url)
        try:
            await self._stop.wait()
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
            await runner.cleanup()
            await client.close()

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop ended on its own
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout)
