"""The ``gpudra`` command: ``up`` (embedded cluster), ``agent`` (node agent), ``controller``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path
from typing import Any

from gpudra import __version__
from gpudra.config import AgentSettings, ControllerSettings, load_settings
from gpudra.errors import GpudraError
from gpudra.telemetry import configure_logging, get_logger

log = get_logger("gpudra")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpudra", description=__doc__)
    parser.add_argument("--version", action="version", version=f"gpudra {__version__}")
    parser.add_argument("--log-format", choices=["console", "json"], default=None, help="default: console")
    parser.add_argument("--log-level", default=None, help="default: INFO")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="run an embedded cluster with simulated GPU nodes")
    up.add_argument(
        "--nodes", default=None, help="PROFILE:COUNT[,PROFILE:COUNT...] (default: the demo fleet)"
    )
    up.add_argument("--port", type=int, default=0, help="API server port; 0 picks a free port")
    up.add_argument(
        "--kubeconfig", type=Path, default=Path("gpudra-demo/kubeconfig"), help="where to write it"
    )
    up.add_argument("--once", action="store_true", help="bring everything up, print the fleet, shut down")
    up.add_argument("--metrics-port", type=int, default=0, help="metrics port (0: a free port, -1: none)")
    up.add_argument("--list-profiles", action="store_true", help="list the node profiles and exit")

    agent = sub.add_parser("agent", help="run the node agent (DaemonSet)")
    agent.add_argument("--node-name", default=None, help="env GPUDRA_NODE_NAME")
    agent.add_argument("--driver-name", default=None, help="env GPUDRA_DRIVER_NAME (default gpu.nvidia.com)")
    agent.add_argument("--backend", choices=["nvml", "simulated"], default=None, help="env GPUDRA_BACKEND")
    agent.add_argument("--simulated-profile", default=None, help="env GPUDRA_SIMULATED_PROFILE")
    agent.add_argument("--kubeconfig", type=Path, default=None, help="env GPUDRA_KUBECONFIG")
    agent.add_argument("--metrics-port", type=int, default=None, help="env GPUDRA_METRICS_PORT (0: off)")

    controller = sub.add_parser("controller", help="run the controller (Deployment)")
    controller.add_argument("--kubeconfig", type=Path, default=None, help="env GPUDRA_KUBECONFIG")
    controller.add_argument("--metrics-port", type=int, default=None, help="env GPUDRA_METRICS_PORT (0: off)")
    return parser


async def _until_signal(main: Any) -> None:
    """Run ``main`` until it ends or SIGINT/SIGTERM arrives, then cancel it cleanly."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(main)
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _run_up(args: argparse.Namespace) -> int:
    from gpudra.cluster.fleet import DEFAULT_FLEET, parse_fleet
    from gpudra.cluster.up import UpOptions, run_up
    from gpudra.hardware.profiles import profile_names

    if args.list_profiles:
        print("\n".join(sorted(profile_names())))
        return 0
    nodes = parse_fleet(args.nodes or DEFAULT_FLEET, set(profile_names()))
    options = UpOptions(
        nodes=nodes,
        port=args.port,
        kubeconfig=args.kubeconfig,
        once=args.once,
        metrics_port=None if args.metrics_port < 0 else args.metrics_port,
    )
    return await run_up(options)


async def _run_agent(args: argparse.Namespace) -> int:
    from gpudra.agent.main import run_agent

    settings = load_settings(
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
    await _until_signal(run_agent(settings))
    return 0


async def _run_controller(args: argparse.Namespace) -> int:
    from gpudra.controller.main import run_controller_process

    settings = load_settings(
        ControllerSettings,
        kubeconfig=args.kubeconfig,
        metrics_port=args.metrics_port,
        log_format=args.log_format,
        log_level=args.log_level,
    )
    await run_controller_process(settings)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging(args.log_format or "console", args.log_level or "INFO")
    runners = {"up": _run_up, "agent": _run_agent, "controller": _run_controller}
    try:
        return asyncio.run(runners[args.command](args))
    except GpudraError as exc:
        print(f"gpudra {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
