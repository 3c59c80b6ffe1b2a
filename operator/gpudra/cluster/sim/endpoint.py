"""The simulator's HTTP endpoint: how ``gpudra sim fault`` reaches a running ``gpudra up``.

``gpudra up`` serves it on 127.0.0.1 (a free port) and writes ``simulator.json`` beside its kubeconfig: the URL
and a random token, readable by its owner only. ``POST /v1/faults`` takes a fault (the GpuFault spec as JSON)
and answers with what happened: 200 with phase Injected or NotHeard, 400 with phase Rejected, 401 without the
token.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from aiohttp import web

from gpudra.cluster.sim.delivery import FaultDelivery
from gpudra.cluster.sim.faults import FaultRejected
from gpudra.telemetry import get_logger

log = get_logger(__name__)

ENDPOINT_FILE = "simulator.json"
FAULTS_PATH = "/v1/faults"


class SimulatorEndpoint:
    def __init__(self, delivery: FaultDelivery, directory: Path) -> None:
        self._delivery = delivery
        self.file = directory / ENDPOINT_FILE
        self._token = secrets.token_urlsafe(24)
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post(FAULTS_PATH, self._fault)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        self.file.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as out:
            json.dump({"url": self.url, "token": self._token, "pid": os.getpid()}, out)
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self.file.unlink(missing_ok=True)

    async def _fault(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self._token}":
            return _reply(401, "Rejected", f"wrong or missing token (see {self.file})")
        try:
            body: Any = await request.json()
        except ValueError:
            return _reply(400, "Rejected", "the body must be a JSON object")
        try:
            outcome = await self._delivery.deliver(body)
        except FaultRejected as exc:
            return _reply(400, "Rejected", str(exc))
        log.info("simulated fault", message=outcome.message, heard=outcome.heard)
        return _reply(200, "Injected" if outcome.heard else "NotHeard", outcome.message)


def _reply(status: int, phase: str, message: str) -> web.Response:
    return web.json_response({"phase": phase, "message": message}, status=status)
