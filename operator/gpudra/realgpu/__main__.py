"""``python -m gpudra.realgpu``: run the real-GPU check and print its JSON summary (also written to
``<out>/summary.json``). Exit status 0 when every step passed or was skipped, 1 when one failed, 2 on bad flags."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import platform
import sys
from pathlib import Path

from gpudra import __version__
from gpudra.realgpu.check import Check
from gpudra.realgpu.rig import Options
from gpudra.realgpu.summary import Summary
from gpudra.telemetry import configure_logging

DEFAULT_HEALTH_SECONDS = 20.0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpudra.realgpu",
        description="gpudra's real agent on this machine's GPUs against an embedded API server: record, slices, "
        "a claim prepared and unprepared over the kubelet's gRPC, CDI device nodes, the health stream, SIGTERM. "
        "Read-only for the hardware: it never changes MIG mode, creates MIG instances or resets a GPU.",
    )
    parser.add_argument("--backend", choices=["nvml", "simulated"], default="nvml")
    parser.add_argument(
        "--simulated-profile",
        default="hgx-h200",
        help="with --backend simulated: the simulated node's profile",
    )
    parser.add_argument("--node-name", default="realgpu-node", help="the Node the agent publishes for")
    parser.add_argument("--driver-name", default="gpu.nvidia.com")
    parser.add_argument(
        "--driver-root",
        type=Path,
        default=None,
        help="the NVIDIA driver's root on the host (default /; /run/nvidia/driver under the GPU Operator); with "
        "--backend simulated the default is a directory of stand-in device nodes",
    )
    parser.add_argument(
        "--health-seconds",
        type=float,
        default=DEFAULT_HEALTH_SECONDS,
        help="how long to listen to the health stream (default 20)",
    )
    parser.add_argument(
        "--allow-mig-on",
        action="store_true",
        help="start the agent even when a GPU has MIG mode on (its start destroys GPU instances that hold no "
        "compute instance)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("realgpu-result"), help="summary.json, recording.json, agent.log"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.health_seconds <= 0:
        print("--health-seconds must be positive", file=sys.stderr)
        return 2
    configure_logging("console", "WARNING")
    out: Path = args.out.absolute()
    out.mkdir(parents=True, exist_ok=True)
    options = Options(
        backend=args.backend,
        simulated_profile=args.simulated_profile,
        node_name=args.node_name,
        driver_name=args.driver_name,
        driver_root=args.driver_root.absolute() if args.driver_root else None,
        health_seconds=args.health_seconds,
        allow_mig_on=args.allow_mig_on,
        out=out,
    )
    summary = Summary(
        {
            "check": "gpudra real-GPU check",
            "gpudra": __version__,
            "host": platform.node(),
            "python": platform.python_version(),
            "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "backend": options.backend,
            **({"simulated_profile": options.simulated_profile} if options.backend == "simulated" else {}),
            "node": options.node_name,
            "health_seconds": options.health_seconds,
            "allow_mig_on": options.allow_mig_on,
            "out": str(out),
        }
    )
    try:
        asyncio.run(Check(options, summary).run())
    except KeyboardInterrupt:  # Ctrl-C: what ran is still reported, the agent and server were stopped
        summary.header["interrupted"] = True
    text = json.dumps(summary.to_json(), indent=2) + "\n"
    (out / "summary.json").write_text(text)
    sys.stdout.write(text)
    if summary.header.get("interrupted"):
        return 130
    return 0 if summary.result == "pass" else 1


if __name__ == "__main__":
    raise SystemExit(main())
