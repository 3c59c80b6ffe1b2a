"""The ``gpudra controller`` process: kopf with gpudra's handlers, metrics and health."""

from __future__ import annotations

import asyncio

from gpudra.config import ControllerSettings
from gpudra.controller.kopfapp import run_controller
from gpudra.metrics import Metrics, metrics_app, serve_metrics


async def run_controller_process(settings: ControllerSettings) -> None:
    metrics = Metrics()
    ready = asyncio.Event()
    runner = None
    if settings.metrics_port:
        runner = await serve_metrics(
            metrics_app(metrics.registry, ready.is_set), settings.metrics_host, settings.metrics_port
        )
    try:
        await run_controller(settings, metrics, ready=ready, standalone=False)
    finally:
        if runner is not None:
            await runner.cleanup()
