"""``gpudra up``: the embedded cluster with a simulated fleet (from ``--nodes``, ``--fleet`` or a copy of a real
cluster), and where its log file goes."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpudra.errors import ConfigurationError
from gpudra.writable import directory_problem


def up_log_file(args: argparse.Namespace) -> Path:
    """The log file of ``gpudra up``: beside the kubeconfig it writes, in the demo directory."""
    return Path(args.kubeconfig).parent / "gpudra.log"


def up_directory_ready(kubeconfig: Path) -> None:
    """The demo directory made (``kubeconfig``'s, where gpudra up's log and state go), or a ConfigurationError
    naming ``--kubeconfig`` and why it cannot be."""
    problem = directory_problem(kubeconfig.parent) or (
        f"{kubeconfig} is a directory" if kubeconfig.is_dir() else None
    )
    if problem is not None:
        raise ConfigurationError(f"--kubeconfig {kubeconfig}: {problem}")
    try:
        kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # where permissions do not tell (/proc, a full disk)
        raise ConfigurationError(
            f"--kubeconfig {kubeconfig}: cannot make {kubeconfig.parent}: {exc.strerror}"
        ) from exc


async def up_command(args: argparse.Namespace) -> int:
    # deferred: the embedded cluster takes seconds to import, and no other command needs it
    from gpudra.cluster.fleet import DEFAULT_FLEET, parse_fleet
    from gpudra.cluster.up import UpOptions, fleet_ready_timeout, run_up
    from gpudra.hardware.simulated.profiles import profile_names

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
        feature_gates_on=args.feature_gates[0],
        feature_gates_off=args.feature_gates[1],
        real_nodes=args.real_nodes,
        ready_timeout=fleet_ready_timeout(len(nodes)),
    )
    if args.health_recovery_seconds is not None:
        options.agent_settings["health_recovery_seconds"] = args.health_recovery_seconds
    return await run_up(options, log_file=up_log_file(args))
