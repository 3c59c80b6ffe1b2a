"""The ``gpudra agent`` process: settings -> backend -> client -> node agent, with metrics and health."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from gpudra.agent.runtime import AgentRuntime
from gpudra.config import AgentSettings
from gpudra.hardware.gpus.backend import GpuBackend
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.heap import freeze_when_started
from gpudra.kube.client import KubeClient
from gpudra.metrics import Metrics, metrics_app, serve_metrics
from gpudra.telemetry import get_logger

if TYPE_CHECKING:  # the simulator is imported only when backend=simulated: a real node never loads it
    from gpudra.hardware.simulated.fake_nvml import FakeNvml

log = get_logger(__name__)


def simulated_nvml(settings: AgentSettings) -> FakeNvml:
    """The simulated node's GPUs: as its state file keeps them, or new from its profile (then kept there)."""
    from gpudra.hardware.simulated.fake_nvml import FakeNvml

    state = settings.simulated_state
    if state is not None and state.exists():
        return FakeNvml.load(state)
    fake = FakeNvml.from_profile(
        settings.simulated_profile,
        node_name=settings.node_name,
        fleet_index=settings.simulated_fleet_index,
    )
    if state is not None:
        fake.persist_to(state)
    return fake


def make_backend(settings: AgentSettings, nvml: FakeNvml | None = None) -> GpuBackend:
    """NVML, or with the simulated backend ``nvml`` (default: :func:`simulated_nvml`)."""
    if settings.backend == "simulated":
        return NvmlBackend(settings.node_name, nvml=nvml if nvml is not None else simulated_nvml(settings))
    return NvmlBackend(settings.node_name)


async def run_agent(settings: AgentSettings, backend: GpuBackend | None = None) -> None:
    metrics = Metrics()
    if backend is None:
        backend = make_backend(settings)
    client = await KubeClient.from_environment(
        settings.kubeconfig, field_manager=f"gpudra-agent-{settings.node_name}"
    )
    runtime = AgentRuntime(settings, backend, client, metrics)
    agent = runtime.agent
    runner = None
    if settings.metrics_port:
        app = metrics_app(metrics.registry, agent.published.is_set)
        runner = await serve_metrics(app, settings.metrics_host, settings.metrics_port)
    log.info("agent starting", node=settings.node_name, driver=settings.driver_name, backend=settings.backend)
    freeze = asyncio.create_task(freeze_when_started(agent.published))
    try:
        await runtime.run()
    finally:
        freeze.cancel()
        if not runtime.handed_over:  # else the node's slices are the newer agent's now
            await asyncio.shield(agent.unmark_node())
        await asyncio.shield(client.close())
        if runner is not None:
            await runner.cleanup()
