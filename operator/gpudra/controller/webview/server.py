"""HTTP of the web view: ``GET /`` (the page as it is now), ``GET /events`` (server-sent events, one per new
version: the fragments that changed), ``GET /healthz``. Read-only: nothing here writes to the cluster.

It runs in the event loop of the process that owns the informers it draws from (the controller's, which starts it
before kopf: kopf treats every task created in its loop after it starts as its own). Explaining pending claims on a
large fleet is CPU work, done in a worker process (``pendingcards``), not in this loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import asdict

from aiohttp import web

from gpudra.controller.webview import html
from gpudra.controller.webview.state import FleetView
from gpudra.controller.webview.updates import Update
from gpudra.errors import ConfigurationError
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
    """The web view over ``view``: ``start()`` listens, starts the view's rebuilding and returns its URL;
    ``stop()`` ends both. The view's informers are run by their owner."""

    def __init__(self, host: str, port: int, view: FleetView) -> None:
        self._host, self._port = host, port
        self._view = view
        self._runner: web.AppRunner | None = None
        self._rebuilding: asyncio.Task[None] | None = None
        self.url = ""

    async def start(self) -> str:
        runner = web.AppRunner(webview_app(self._view), access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self._host, self._port)
            await site.start()
        except OSError as error:
            await runner.cleanup()
            where = f"{self._host}:{self._port}"
            raise ConfigurationError(f"the web view cannot listen on {where}: {error}") from error
        self._runner = runner
        port = runner.addresses[0][1]
        self.url = f"http://{'127.0.0.1' if self._host in ('0.0.0.0', '') else self._host}:{port}/"
        self._rebuilding = asyncio.create_task(self._view.run(), name="webview")
        log.info("web view serving", url=self.url)
        return self.url

    async def stop(self) -> None:
        if self._rebuilding is not None:
            self._rebuilding.cancel()
            await asyncio.gather(self._rebuilding, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
