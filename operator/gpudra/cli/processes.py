"""The long-running processes of a cluster's gpudra: ``gpudra agent`` (the node agent's DaemonSet),
``gpudra imex-daemon`` (a ComputeDomain's daemon on one node) and ``gpudra controller`` (the Deployment).

Each process imports only its own package, when it starts: an agent or daemon pod never loads the controller's kopf
or the embedded cluster, and the other commands load none of them."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from typing import Any, TypeVar

from gpudra.config import AgentSettings, CommonSettings, ControllerSettings, ImexDaemonSettings, load_settings
from gpudra.errors import ConfigurationError
from gpudra.telemetry import configure_logging

S = TypeVar("S", bound=CommonSettings)


def process_settings(cls: type[S], **values: Any) -> S:
    """The process's settings (flags over GPUDRA_* variables), and its log set up as they say: a pod's
    ``GPUDRA_LOG_FORMAT`` and ``GPUDRA_LOG_LEVEL`` (the Helm chart's ``logFormat`` and ``logLevel``) rule its log
    as the flags ``--log-format`` and ``--log-level`` do."""
    settings = load_settings(cls, **values)
    configure_logging(settings.log_format, settings.log_level)
    return settings


async def until_signal(main: Any) -> None:
    """Run ``main`` until it ends or SIGINT/SIGTERM arrives, then cancel it cleanly."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(main)
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def agent_command(args: argparse.Namespace) -> int:
    from gpudra.agent.main import make_backend, run_agent, simulated_nvml

    settings = process_settings(
        AgentSettings,
        node_name=args.node_name,
        driver_name=args.driver_name,
        backend=args.backend,
        simulated_profile=args.simulated_profile,
        kubeconfig=args.kubeconfig,
        metrics_port=args.metrics_port,
        log_format=args.log_format,
        log_level=args.log_level,
    )
    if args.simulated_faults is None:
        await until_signal(run_agent(settings))
        return 0
    # gpudra up --agent-processes: faults for the simulated GPUs of this process (simulation only)
    from gpudra.cluster.sim.inbox import FaultInbox

    if settings.backend != "simulated":
        raise ConfigurationError("--simulated-faults needs the simulated backend (GPUDRA_BACKEND=simulated)")
    nvml = simulated_nvml(settings)
    inbox = FaultInbox(args.simulated_faults)
    await until_signal(
        inbox.serving(settings.node_name, nvml, run_agent(settings, make_backend(settings, nvml)))
    )
    return 0


async def imex_daemon_command(args: argparse.Namespace) -> int:
    from gpudra.agent.computedomain.daemon import DaemonIdentity, run_daemon
    from gpudra.kube.client import KubeClient

    settings = process_settings(
        ImexDaemonSettings, kubeconfig=args.kubeconfig, log_format=args.log_format, log_level=args.log_level
    )
    identity = DaemonIdentity(
        namespace=settings.namespace,
        domain_uid=settings.domain_uid,
        clique_id=settings.clique_id,
        node_name=settings.node_name,
        ip_address=settings.ip_address,
    )
    client = await KubeClient.from_environment(settings.kubeconfig, field_manager="gpudra-imex-daemon")
    try:
        await until_signal(run_daemon(client, identity, stop=asyncio.Event(), command=args.exec))
    finally:
        await client.close()
    return 0


async def controller_command(args: argparse.Namespace) -> int:
    from gpudra.controller.main import run_controller_process

    settings = process_settings(
        ControllerSettings,
        kubeconfig=args.kubeconfig,
        metrics_port=args.metrics_port,
        web_port=args.web_port,
        log_format=args.log_format,
        log_level=args.log_level,
    )
    await run_controller_process(settings)
    return 0
