"""The ``gpudra`` command's flags: the argparse tree of every command; the commands themselves are run by the
modules beside this one."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpudra import __version__
from gpudra.cli.sim import SIM_FAULTS

DESCRIPTION = """The gpudra command: `up` (embedded cluster), `agent` (node agent), `controller`, `explain`, `status`,
`hardware record`, `sim fault` (a fault on a simulated node of a running `up`)."""  # plain text: --help shows it


def feature_gates(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``A,B=true,C=false`` -> (gates on, gates off); argparse reports a bad one as a usage error."""
    on: list[str] = []
    off: list[str] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        if not name.isidentifier() or value not in ("", "true", "false"):
            raise argparse.ArgumentTypeError(f"{item!r} is not GATE, GATE=true or GATE=false")
        (off if value == "false" else on).append(name)
    return tuple(on), tuple(off)


def port(text: str) -> int:
    """A TCP port, 0 (a free one) to 65535; argparse reports another as a usage error."""
    return _number(text, 0, 65535, "a port, 0 to 65535")


def port_or_none(text: str) -> int:
    """A TCP port, 0 (a free one) to 65535, or -1 (none)."""
    return _number(text, -1, 65535, "a port, 0 to 65535, or -1 for none")


def count(text: str) -> int:
    """A whole number, 0 or more."""
    return _number(text, 0, 1_000_000, "a whole number, 0 or more")


def seconds(text: str) -> float:
    """A number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds, 0 or more")
    return value


def _number(text: str, low: int, high: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


def build_parser(prog: str = "gpudra") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"gpudra {__version__}")
    parser.add_argument("--log-format", choices=["console", "json"], default=None, help="default: console")
    parser.add_argument("--log-level", default=None, help="default: INFO")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_up(sub)
    _add_agent(sub)
    _add_imex_daemon(sub)
    _add_explain(sub)
    _add_status(sub)
    _add_hardware(sub)
    _add_sim(sub)
    _add_controller(sub)
    return parser


def _add_up(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``gpudra up``: the embedded cluster, its fleet and its log."""
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
    up.add_argument("--port", type=port, default=0, help="API server port; 0 picks a free port")
    up.add_argument(
        "--kubeconfig", type=Path, default=Path("gpudra-demo/kubeconfig"), help="where to write it"
    )
    up.add_argument("--once", action="store_true", help="bring everything up, print the fleet, shut down")
    up.add_argument(
        "--metrics-port", type=port_or_none, default=0, help="metrics port (0: a free port, -1: none)"
    )
    up.add_argument(
        "--web-port",
        type=port_or_none,
        default=0,
        help="port of the web view on 127.0.0.1 (0: a free port, -1: none)",
    )
    up.add_argument("--list-profiles", action="store_true", help="list the node profiles and exit")
    up.add_argument(
        "--api-server-process",
        action="store_true",
        help="run the API server in a process of its own (another core), reached over HTTP",
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
        help="with --control-plane kubernetes: the built version to run (default: $K8S_VERSION, else 1.37.2); "
        "embedded: the version its API server emulates, 1.34 to 1.37 (default 1.37)",
    )
    up.add_argument(
        "--feature-gates",
        type=feature_gates,
        default=((), ()),
        metavar="GATE[=true|false],...",
        help="Kubernetes feature gates on (a bare name or =true) or off (=false): on every component of "
        "--control-plane kubernetes (GenericWorkload also serves the PodGroup API, scheduling.k8s.io/v1beta1); "
        "embedded: the gates its API server models (turning off is for --control-plane kubernetes only)",
    )
    up.add_argument(
        "--real-kubelet",
        type=count,
        default=0,
        metavar="N",
        help="with --control-plane kubernetes: the first N nodes run under a real kubelet (same version) over "
        "Kubernetes' fake container runtime instead of the stand-in kubelet (needs root)",
    )
    up.add_argument(
        "--real-nodes",
        type=count,
        default=0,
        metavar="N",
        help="with --control-plane kubernetes: the first N nodes are real nodes (a real kubelet over containerd "
        "and runc, pods in real containers) with gpudra installed by its Helm chart from its image; the GPUs stay "
        "simulated (needs root, `make node` and `make images`; docs/real-node.md)",
    )
    up.add_argument(
        "--dynamic-mig",
        action="store_true",
        help="MIG-capable GPUs start with MIG on and no instances, published as dynamic MIG (created at prepare)",
    )
    up.add_argument(
        "--health-recovery-seconds",
        type=seconds,
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


def _add_agent(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``gpudra agent``: the node agent; each flag falls back to its env setting."""
    agent = sub.add_parser("agent", help="run the node agent (DaemonSet)")
    agent.add_argument("--node-name", default=None, help="env GPUDRA_NODE_NAME")
    agent.add_argument("--driver-name", default=None, help="env GPUDRA_DRIVER_NAME (default gpu.nvidia.com)")
    agent.add_argument("--backend", choices=["nvml", "simulated"], default=None, help="env GPUDRA_BACKEND")
    agent.add_argument("--simulated-profile", default=None, help="env GPUDRA_SIMULATED_PROFILE")
    agent.add_argument("--kubeconfig", type=Path, default=None, help="env GPUDRA_KUBECONFIG")
    agent.add_argument("--metrics-port", type=int, default=None, help="env GPUDRA_METRICS_PORT (0: off)")
    # gpudra up --agent-processes: the directory gpudra sim fault drops this node's faults into (simulation only)
    agent.add_argument("--simulated-faults", type=Path, default=None, help=argparse.SUPPRESS)


def _add_imex_daemon(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``gpudra imex-daemon``: a ComputeDomain's IMEX daemon on one node."""
    imex = sub.add_parser(
        "imex-daemon",
        help="a ComputeDomain's IMEX daemon on one node (the per-domain DaemonSet runs it)",
        description="Registers the node in the domain's ComputeDomainClique, reports Ready while its IMEX "
        "service runs (simulated when no command is given), releases the entry on exit. Identity from "
        "the env: COMPUTE_DOMAIN_UUID, CLIQUE_ID, NODE_NAME, POD_NAMESPACE, POD_IP.",
    )
    imex.add_argument("--kubeconfig", type=Path, default=None, help="env GPUDRA_KUBECONFIG")
    imex.add_argument("exec", nargs="*", help="the IMEX service to supervise (after --), e.g. nvidia-imex")


def _add_explain(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``gpudra explain``: a pending claim, or a manifest, explained."""
    explain = sub.add_parser(
        "explain", help="why a claim is pending, or whether a claim would fit, and where"
    )
    explain.add_argument(
        "kind", nargs="?", choices=["claim", "pod"], help="a ResourceClaim, or every claim of a pod"
    )
    explain.add_argument("name", nargs="?", help="the claim's or the pod's name")
    explain.add_argument("-n", "--namespace", default="default")
    explain.add_argument(
        "-f", "--file", type=Path, default=None, help="a ResourceClaim manifest; nothing is created"
    )
    explain.add_argument(
        "--kubeconfig", type=Path, default=None, help="default: $KUBECONFIG or ~/.kube/config"
    )
    explain.add_argument("--driver-name", default="gpu.nvidia.com", help="for the MIG planner section")
    explain.add_argument(
        "-o",
        "--output",
        choices=["wide", "json"],
        default=None,
        help="default: the sentence and the nearest nodes, in 80 columns; wide: every node, the numbers per "
        "request, the closest devices, the selectors and the MIG planner's section; json: the same as data. "
        "Exit status 0: fits now (or allocated); 1: cannot fit; 2: bad input",
    )


def _add_status(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``gpudra status``: the fleet's table."""
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


def _add_hardware(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``gpudra hardware record``: what NVML reports, as JSON."""
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


def _add_sim(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``gpudra sim fault``: a fault on a simulated node of a running ``gpudra up``."""
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
    fault.add_argument("fault", choices=sorted(SIM_FAULTS), help="what happens")
    fault.add_argument(
        "value", nargs="?", default=None, help="xid: the XID code; ecc: double-bit (default) or single-bit"
    )
    fault.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help="of the running gpudra up (default: $KUBECONFIG, then gpudra-demo/kubeconfig)",
    )


def _add_controller(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``gpudra controller``: the controller; each flag falls back to its env setting."""
    controller = sub.add_parser("controller", help="run the controller (Deployment)")
    controller.add_argument("--kubeconfig", type=Path, default=None, help="env GPUDRA_KUBECONFIG")
    controller.add_argument("--metrics-port", type=int, default=None, help="env GPUDRA_METRICS_PORT (0: off)")
    controller.add_argument(
        "--web-port", type=int, default=None, help="env GPUDRA_WEB_PORT: serve the web view (0: a free port)"
    )
