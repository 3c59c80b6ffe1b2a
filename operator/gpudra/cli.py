"""The ``gpudra`` command: ``up`` (embedded cluster), ``agent`` (node agent), ``controller``, ``explain``,
``status``, ``hardware record``, ``sim fault`` (a fault on a simulated node of a running ``up``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path
from typing import Any

from gpudra import __version__
from gpudra.config import AgentSettings, ControllerSettings, ImexDaemonSettings, load_settings
from gpudra.errors import GpudraError
from gpudra.telemetry import configure_logging, get_logger

log = get_logger("gpudra")


_SIM_FAULTS = {
    "xid": "Xid",
    "ecc": "Ecc",
    "gpu-lost": "GpuLost",
    "fabric-lost": "FabricLost",
    "recover": "Recover",
}


def _parser(prog: str = "gpudra") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--version", action="version", version=f"gpudra {__version__}")
    parser.add_argument("--log-format", choices=["console", "json"], default=None, help="default: console")
    parser.add_argument("--log-level", default=None, help="default: INFO")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="run an embedded cluster with simulated GPU nodes")
    fleet = up.add_mutually_exclusive_group()
    fleet.add_argument(
        "--nodes", default=None, help="PROFILE:COUNT[,PROFILE:COUNT...] (default: the demo fleet)"
    )
    fleet.add_argument(
        "--fleet",
        type=Path,
        default=None,
        help="a fleet file: node groups, profiles, recordings (docs/simulator.md)",
    )
    fleet.add_argument(
        "--from-cluster",
        type=Path,
        default=None,
        metavar="KUBECONFIG",
        help="a simulated copy of a real cluster's GPU nodes and DeviceClasses; only reads that cluster",
    )
    up.add_argument(
        "--with-claims",
        action="store_true",
        help="with --from-cluster: copy its pending and allocated ResourceClaims with their pods too",
    )
    up.add_argument("--port", type=int, default=0, help="API server port; 0 picks a free port")
    up.add_argument(
        "--kubeconfig", type=Path, default=Path("gpudra-demo/kubeconfig"), help="where to write it"
    )
    up.add_argument("--once", action="store_true", help="bring everything up, print the fleet, shut down")
    up.add_argument("--metrics-port", type=int, default=0, help="metrics port (0: a free port, -1: none)")
    up.add_argument(
        "--web-port", type=int, default=0, help="port of the web view on 127.0.0.1 (0: a free port, -1: none)"
    )
    up.add_argument("--list-profiles", action="store_true", help="list the node profiles and exit")
    up.add_argument(
        "--api-server-process",
        action="store_true",
        help="run the API server in a process of its own (another core; for large fleets)",
    )
    up.add_argument(
        "--control-plane",
        choices=["embedded", "kubernetes"],
        default="embedded",
        help="embedded: gpudra's own API server and stand-ins (fast); kubernetes: the real kube-apiserver, "
        "kube-scheduler and kube-controller-manager built by `make kubernetes`",
    )
    up.add_argument(
        "--agent-processes",
        action="store_true",
        help="run each simulated node's agent as a process of its own, as its DaemonSet pod would run",
    )
    up.add_argument(
        "--kubernetes-version",
        default=None,
        help="with --control-plane kubernetes: the built version to run (default: $K8S_VERSION, else 1.37.2)",
    )
    up.add_argument(
        "--real-kubelet",
        type=int,
        default=0,
        metavar="N",
        help="with --control-plane kubernetes: the first N nodes run under a real kubelet (same version) over "
        "Kubernetes' fake container runtime instead of the stand-in kubelet (needs root)",
    )
    up.add_argument(
        "--dynamic-mig",
        action="store_true",
        help="MIG-capable GPUs start with MIG on and no instances, published as dynamic MIG (created at prepare)",
    )
    up.add_argument(
        "--health-recovery-seconds",
        type=float,
        default=None,
        help="how long a device must be quiet before its health taint goes (default: the agent's, 300)",
    )
    up.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="bring the log to the console as well as the log file (-vv: at DEBUG)",
    )
    up.add_argument(
        "--log-level",
        default=argparse.SUPPRESS,
        help="level of the log file (<demo dir>/gpudra.log) and, with -v, of the console; default INFO",
    )

    agent = sub.add_parser("agent", help="run the node agent (DaemonSet)")
    agent.add_argument("--node-name", default=None, help="env GPUDRA_NODE_NAME")
    agent.add_argument("--driver-name", default=None, help="env GPUDRA_DRIVER_NAME (default gpu.nvidia.com)")
    agent.add_argument("--backend", choices=["nvml", "simulated"], default=None, help="env GPUDRA_BACKEND")
    agent.add_argument("--simulated-profile", default=None, help="env GPUDRA_SIMULATED_PROFILE")
    agent.add_argument("--kubeconfig", type=Path, default=None, help="env GPUDRA_KUBECONFIG")
    agent.add_argument("--metrics-port", type=int, default=None, help="env GPUDRA_METRICS_PORT (0: off)")

    imex = sub.add_parser(
        "imex-daemon",
        help="a ComputeDomain's IMEX daemon on one node (the per-domain DaemonSet runs it)",
        description="Registers the node in the domain's ComputeDomainClique, reports Ready while its IMEX "
        "service runs (simulated when no command is given), releases the entry on exit. Identity from "
        "the env: COMPUTE_DOMAIN_UUID, CLIQUE_ID, NODE_NAME, POD_NAMESPACE, POD_IP.",
    )
    imex.add_argument("--kubeconfig", type=Path, default=None, help="env GPUDRA_KUBECONFIG")
    imex.add_argument("exec", nargs="*", help="the IMEX service to supervise (after --), e.g. nvidia-imex")

    explain = sub.add_parser(
        "explain", help="why a claim is pending, or whether a claim would fit, and where"
    )
    explain.add_argument("kind", nargs="?", choices=["claim"], help="what to explain (a ResourceClaim)")
    explain.add_argument("name", nargs="?", help="the claim's name")
    explain.add_argument("-n", "--namespace", default="default")
    explain.add_argument(
        "-f", "--file", type=Path, default=None, help="a ResourceClaim manifest; nothing is created"
    )
    explain.add_argument(
        "--kubeconfig", type=Path, default=None, help="default: $KUBECONFIG or ~/.kube/config"
    )
    explain.add_argument("--driver-name", default="gpu.nvidia.com", help="for the MIG planner section")

    status = sub.add_parser(
        "status", help="the fleet: nodes, GPUs, MIG devices, allocated and unhealthy devices"
    )
    status.add_argument(
        "--kubeconfig", type=Path, default=None, help="default: $KUBECONFIG or ~/.kube/config"
    )
    status.add_argument("--driver-name", default="gpu.nvidia.com")
    status.add_argument(
        "-o",
        "--output",
        choices=["wide", "json", "yaml"],
        default=None,
        help="wide: also devices and slices per node; json, yaml: the rows as data",
    )

    hardware = sub.add_parser("hardware", help="this node's GPUs as NVML reports them")
    hardware_sub = hardware.add_subparsers(dest="hardware_command", required=True)
    record = hardware_sub.add_parser(
        "record", help="record what NVML reports (read-only) as JSON, to check gpudra against your GPUs"
    )
    record.add_argument("-o", "--output", type=Path, default=None, help="default: standard output")
    record.add_argument("--node-name", default="recorded-node", help="the node name the inventory carries")
    record.add_argument(
        "--simulated-profile", default=None, help="record a simulated node of this profile instead of NVML"
    )

    sim = sub.add_parser("sim", help="the simulated fleet of a running `gpudra up`")
    sim_sub = sim.add_subparsers(dest="sim_command", required=True)
    fault = sim_sub.add_parser(
        "fault",
        help="a GPU fault or hardware change on a simulated node",
        description="Faults: xid CODE, ecc [double-bit|single-bit], gpu-lost, fabric-lost, recover. "
        "DEVICE is a device as the ResourceSlice names it (gpu-3, gpu-1-mig-1g5gb-19-2), a GPU index, or all. "
        "The running `gpudra up` is found by the simulator.json beside its kubeconfig.",
    )
    fault.add_argument("node", help="the simulated node, e.g. dgx-h100-0")
    fault.add_argument("device", help="gpu-3, a MIG device name, a GPU index, or all")
    fault.add_argument("fault", choices=sorted(_SIM_FAULTS), help="what happens")
    fault.add_argument(
        "value", nargs="?", default=None, help="xid: the XID code; ecc: double-bit (default) or single-bit"
    )
    fault.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help="of the running gpudra up (default: $KUBECONFIG, then gpudra-demo/kubeconfig)",
    )

    controller = sub.add_parser("controller", help="run the controller (Deployment)")
    controller.add_argument("--kubeconfig", type=Path, default=None, help="env GPUDRA_KUBECONFIG")
    controller.add_argument("--metrics-port", type=int, default=None, help="env GPUDRA_METRICS_PORT (0: off)")
    controller.add_argument(
        "--web-port", type=int, default=None, help="env GPUDRA_WEB_PORT: serve the web view (0: a free port)"
    )
    return parser


async def _until_signal(main: Any) -> None:
    """Run ``main`` until it ends or SIGINT/SIGTERM arrives, then cancel it cleanly."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(main)
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _up_log_file(args: argparse.Namespace) -> Path:
    return Path(args.kubeconfig).parent / "gpudra.log"


async def _run_up(args: argparse.Namespace) -> int:
    from gpudra.cluster.fleet import DEFAULT_FLEET, parse_fleet
    from gpudra.cluster.up import UpOptions, run_up
    from gpudra.errors import ConfigurationError
    from gpudra.hardware.profiles import profile_names

    if args.list_profiles:
        print("\n".join(sorted(profile_names())))
        return 0
    if args.with_claims and args.from_cluster is None:
        raise ConfigurationError(
            "--with-claims copies a real cluster's claims: give --from-cluster KUBECONFIG"
        )
    seed = None
    if args.from_cluster is not None:
        from gpudra.cluster.sim.clustercopy import read_cluster, seeder

        print(
            f"gpudra up --from-cluster: reading {args.from_cluster.resolve()} (its current context) with get and "
            "list only; nothing is written to that cluster",
            flush=True,
        )
        copy = await read_cluster(args.from_cluster, with_claims=args.with_claims)
        print("\n  ".join([copy.summary(), *copy.notes]), flush=True)
        nodes, seed = copy.nodes, seeder(copy)
    elif args.fleet is not None:
        from gpudra.cluster.sim.fleetfile import load_fleet

        nodes = load_fleet(args.fleet)
    else:
        nodes = parse_fleet(args.nodes or DEFAULT_FLEET, set(profile_names()))
    options = UpOptions(
        nodes=nodes,
        port=args.port,
        kubeconfig=args.kubeconfig,
        once=args.once,
        metrics_port=None if args.metrics_port < 0 else args.metrics_port,
        web_port=None if args.web_port < 0 else args.web_port,
        dynamic_mig=args.dynamic_mig,
        api_server_process=args.api_server_process,
        control_plane=args.control_plane,
        kubernetes_version=args.kubernetes_version,
        agent_processes=args.agent_processes,
        seed=seed,
        real_kubelets=args.real_kubelet,
    )
    if args.health_recovery_seconds is not None:
        options.agent_settings["health_recovery_seconds"] = args.health_recovery_seconds
    return await run_up(options, log_file=_up_log_file(args))


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


async def _run_imex_daemon(args: argparse.Namespace) -> int:
    from gpudra.agent.computedomain.daemon import DaemonIdentity, run_daemon
    from gpudra.kube.client import KubeClient

    settings = load_settings(ImexDaemonSettings, kubeconfig=args.kubeconfig)
    identity = DaemonIdentity(
        namespace=settings.namespace,
        domain_uid=settings.domain_uid,
        clique_id=settings.clique_id,
        node_name=settings.node_name,
        ip_address=settings.ip_address,
    )
    client = await KubeClient.from_environment(settings.kubeconfig, field_manager="gpudra-imex-daemon")
    try:
        await _until_signal(run_daemon(client, identity, stop=asyncio.Event(), command=args.exec))
    finally:
        await client.close()
    return 0


async def _run_controller(args: argparse.Namespace) -> int:
    from gpudra.controller.main import run_controller_process

    settings = load_settings(
        ControllerSettings,
        kubeconfig=args.kubeconfig,
        metrics_port=args.metrics_port,
        web_port=args.web_port,
        log_format=args.log_format,
        log_level=args.log_level,
    )
    await run_controller_process(settings)
    return 0


async def _run_explain(args: argparse.Namespace) -> int:
    import yaml
    from pydantic import ValidationError
    from rich.console import Console

    from gpudra.allocator.requests import claim_key
    from gpudra.allocator.result import Allocation
    from gpudra.api.dra import ResourceClaim
    from gpudra.controller.explaining import explain, explanation, load_view
    from gpudra.devices.classes import load_device_classes
    from gpudra.errors import ConfigurationError
    from gpudra.kube.client import KubeClient
    from gpudra.kube.resources import RESOURCE_CLAIMS
    from gpudra.planning.migdemand import plan_pending
    from gpudra.reports import allocation_table, mig_plan_report, outcome_report, print_fitted

    if (args.file is None) == (args.name is None):
        raise ConfigurationError("explain: give either `claim NAME` or `--file claim.yaml`")
    client = await KubeClient.from_environment(args.kubeconfig, field_manager="gpudra-explain")
    console = Console()
    try:
        if args.file is not None:
            try:
                body = yaml.safe_load(args.file.read_text())
            except (OSError, yaml.YAMLError) as exc:
                raise ConfigurationError(f"explain: cannot read {args.file}: {exc}") from exc
            if not isinstance(body, dict) or body.get("kind") != "ResourceClaim":
                raise ConfigurationError(f"explain: {args.file} must hold one ResourceClaim")
            body.setdefault("metadata", {}).setdefault("namespace", args.namespace)
            body["metadata"].setdefault("name", args.file.stem)
            try:
                claim = ResourceClaim.model_validate(body)
            except ValidationError as exc:
                raise ConfigurationError(f"explain: {args.file} is not a valid ResourceClaim: {exc}") from exc
            skip = None
        else:
            claim = await client.get_as(ResourceClaim, RESOURCE_CLAIMS, args.name, args.namespace)
            if claim.allocation is not None:
                title = f"claim {args.namespace}/{args.name} is allocated"
                print_fitted(console, allocation_table(title, claim.allocation))
                return 0
            skip = claim.metadata.uid
        view = await load_view(client, skip_claim_uid=skip)
        outcome = explain(view, claim)
        if isinstance(outcome, Allocation):
            print_fitted(console, outcome_report(outcome))
            return 0
        # the planner serves the pending claims together, as the controller does
        waiting = [*(c for c in view.pending if c.metadata.uid != skip), claim]
        plan = plan_pending(view.allocator, waiting, args.driver_name)
        shipped = {
            (c.metadata.name or "", s.cel.expression)
            for c in load_device_classes(gpu_driver=args.driver_name)
            for s in c.spec.selectors or ()
            if s.cel is not None
        }
        print_fitted(console, outcome_report(explanation(view, claim, outcome, plan), shipped))
        section = mig_plan_report(plan, claim_key(claim))
        if section is not None:
            print_fitted(console, section)
    finally:
        await client.close()
    return 0


async def _run_status(args: argparse.Namespace) -> int:
    import json

    import yaml
    from rich.console import Console

    from gpudra.kube.client import KubeClient
    from gpudra.reports import fleet_table, list_fleet, print_fitted

    client = await KubeClient.from_environment(args.kubeconfig, field_manager="gpudra-status")
    try:
        rows = await list_fleet(client, args.driver_name)
    finally:
        await client.close()
    data = {"nodes": [row.to_data() for row in rows]}
    if args.output == "json":
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    elif args.output == "yaml":
        sys.stdout.write(yaml.safe_dump(data, sort_keys=False))
    else:
        print_fitted(Console(), fleet_table(rows, wide=args.output == "wide"))
    return 0


async def _run_hardware(args: argparse.Namespace) -> int:
    import datetime
    import json
    from importlib import metadata

    from gpudra.devices.build import build_devices
    from gpudra.hardware.inventory import NodeInventory
    from gpudra.hardware.nvml import NvmlBackend, load_binding
    from gpudra.hardware.recording import ReadOnlyNvml, record
    from gpudra.hardware.simulated import FakeNvml

    if args.simulated_profile:
        nvml = FakeNvml.from_profile(args.simulated_profile, node_name=args.node_name)
        binding = f"simulated:{args.simulated_profile}"
    else:
        nvml = load_binding()
        binding = f"nvidia-ml-py {metadata.version('nvidia-ml-py')}"
    backend = NvmlBackend(args.node_name, ReadOnlyNvml(nvml))
    try:
        recording = record(backend)
    finally:
        backend.close()
    recording["recorded_with"] = {
        "gpudra": __version__,
        "binding": binding,
        "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    if "error" not in recording["inventory"]:
        inventory = NodeInventory.model_validate(recording["inventory"])
        recording["devices"] = [
            d.model_dump(mode="json", exclude_none=True) for d in build_devices(inventory)
        ]
    text = json.dumps(recording, indent=2, sort_keys=True) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
    return 0


async def _run_sim(args: argparse.Namespace) -> int:
    import os

    from gpudra.cluster.sim.remote import send_fault
    from gpudra.errors import ConfigurationError

    fault: dict[str, Any] = {"nodeName": args.node, "device": args.device, "fault": _SIM_FAULTS[args.fault]}
    if args.fault == "xid":
        if args.value is None or not args.value.isdigit():
            raise ConfigurationError("sim fault: xid needs the XID code, e.g. `xid 79`")
        fault["xid"] = int(args.value)
    elif args.fault == "ecc":
        kinds = {None: "EccDoubleBit", "double-bit": "EccDoubleBit", "single-bit": "EccSingleBit"}
        if args.value not in kinds:
            raise ConfigurationError(f"sim fault: ecc takes double-bit or single-bit, not {args.value!r}")
        fault["fault"] = kinds[args.value]
    elif args.value is not None:
        raise ConfigurationError(f"sim fault: {args.fault} takes no value ({args.value!r} given)")
    kubeconfig = args.kubeconfig or Path(os.environ.get("KUBECONFIG") or "gpudra-demo/kubeconfig")
    phase, message = await send_fault(kubeconfig, fault)
    print(f"{phase}: {message}", file=sys.stdout if phase == "Injected" else sys.stderr)
    return {"Injected": 0, "NotHeard": 1}.get(phase, 2)


def _configure_logging(args: argparse.Namespace) -> None:
    """``gpudra up`` logs to a file in its demo directory and keeps the console for its progress and summary
    (warnings and errors still show; ``-v`` brings the log there too); other commands log to standard error."""
    level = args.log_level or "INFO"
    if args.command != "up":
        configure_logging(args.log_format or "console", level)
        return
    if args.verbose >= 2 and not args.log_level:
        level = "DEBUG"
    console = level if args.verbose else "WARNING"
    configure_logging(args.log_format or "console", level, console_level=console, log_file=_up_log_file(args))


PLUGIN_COMMANDS = ("explain", "status")
PLUGIN_USAGE = """usage: kubectl gpudra explain claim NAME [-n NAMESPACE] | --file claim.yaml
       kubectl gpudra status [-o wide|json|yaml]

gpudra as a kubectl plugin: why a claim is pending (or whether a claim would fit, and where), and the fleet's
GPUs, MIG devices, allocated and unhealthy devices. The cluster is kubectl's: $KUBECONFIG or --kubeconfig.
`kubectl gpudra explain --help` and `kubectl gpudra status --help` list every option.
"""


def kubectl_plugin(argv: list[str] | None = None) -> int:
    """``kubectl-gpudra``: kubectl runs the first ``kubectl-gpudra`` on PATH with the words after ``gpudra``,
    so ``kubectl gpudra explain claim NAME`` is ``gpudra explain claim NAME``. Only the commands that read a
    cluster are offered; the processes (agent, controller, up) are not a kubectl user's."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(PLUGIN_USAGE, end="")
        return 0
    if args[0] not in PLUGIN_COMMANDS:
        print(f"kubectl gpudra: unknown command {args[0]!r}\n\n{PLUGIN_USAGE}", end="", file=sys.stderr)
        return 2
    return main(args, prog="kubectl gpudra")


def main(argv: list[str] | None = None, *, prog: str = "gpudra") -> int:
    args = _parser(prog).parse_args(argv)
    runners = {
        "up": _run_up,
        "agent": _run_agent,
        "imex-daemon": _run_imex_daemon,
        "controller": _run_controller,
        "explain": _run_explain,
        "status": _run_status,
        "hardware": _run_hardware,
        "sim": _run_sim,
    }
    try:
        _configure_logging(args)
        return asyncio.run(runners[args.command](args))
    except GpudraError as exc:
        print(f"{prog} {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
