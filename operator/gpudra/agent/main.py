"""The ``gpudra agent`` process: settings -> backend -> client -> node agent, with metrics and health."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING

from gpudra.agent.devicenodes import wait_for_device_nodes
from gpudra.agent.runtime import AgentRuntime
from gpudra.agent.startdirs import check_agent_directories
from gpudra.config import AgentSettings
from gpudra.errors import ConfigurationError, HardwareError
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


_DRIVER_ADVICE = {
    "NVML_ERROR_LIBRARY_NOT_FOUND": "the NVIDIA driver's libnvidia-ml.so.1 is not in the agent's container: is the "
    "driver installed on this node, and does the NVIDIA container toolkit inject it (the agent asks for it with "
    "NVIDIA_VISIBLE_DEVICES=all)? The agent belongs on GPU nodes only (the chart's agent.nodeSelector)",
    "NVML_ERROR_DRIVER_NOT_LOADED": "the NVIDIA kernel module is not loaded on this node (nvidia-smi on the node "
    "says the same); under the GPU Operator, its driver pod installs it",
    "NVML_ERROR_NO_PERMISSION": "the agent's container may not open the GPUs' device nodes: the agent runs "
    "privileged (docs/install.md)",
}


def driver_ready(backend: NvmlBackend) -> None:
    """NVML initialised, or a ConfigurationError saying why the node's NVIDIA driver cannot be used and what to
    look at: the agent stops at start with that one line rather than half-starting and failing in its parts."""
    try:
        backend.initialise()
    except HardwareError as exc:
        advice = _DRIVER_ADVICE.get(exc.code)
        raise ConfigurationError(f"{exc}: {advice}" if advice else str(exc)) from exc


async def run_agent(settings: AgentSettings, backend: GpuBackend | None = None) -> None:
    metrics = Metrics()
    check_agent_directories(settings)
    if backend is None:
        backend = make_backend(settings)
    if isinstance(backend, NvmlBackend):
        await asyncio.to_thread(driver_ready, backend)
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
        if settings.serve_kubelet_plugin and (
            settings.backend == "nvml" or settings.driver_root_mount is not None
        ):
            inventory = await asyncio.to_thread(backend.read_inventory, nvlink_peers=False)
            await wait_for_device_nodes(
                runtime.device_root,
                settings.driver_root,
                [g.minor for g in inventory.gpus],
                report=partial(runtime.warn_node, "DeviceNodesMissing"),
            )
        await runtime.run()
    finally:
        freeze.cancel()
        if not runtime.handed_over:  # else the node's slices are the newer agent's now
            await asyncio.shield(agent.unmark_node())
        await asyncio.shield(client.close())
        if runner is not None:
            await runner.cleanup()
