"""The ``gpudra controller`` process: kopf with gpudra's handlers, metrics and health."""

from __future__ import annotations

import asyncio

from gpudra.config import ControllerSettings
from gpudra.controller.kopfapp import run_controller
from gpudra.heap import freeze_when_started
from gpudra.metrics import Metrics, metrics_app, serve_metrics


async def run_controller_process(settings: ControllerSettings) -> None:
    metrics = Metrics()
    ready = asyncio.Event()
    runner = None
    if settings.metrics_port:
        runner = await serve_metrics(
            metrics_app(metrics.registry, ready.is_set), settings.metrics_host, settings.metrics_port
        )
    freeze = asyncio.create_task(freeze_when_started(ready))
    try:
        await run_controller(settings, metrics, ready=ready, standalone=False)
    finally:
        freeze.cancel()
        if runner is not None:
            await runner.cleanup()
