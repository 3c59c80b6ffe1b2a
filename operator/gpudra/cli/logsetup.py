"""Where a command's log goes: ``gpudra up`` logs to a file in its demo directory and keeps the console for its
progress and summary; the other commands log to standard error."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpudra.cli.up import up_directory_ready, up_log_file
from gpudra.telemetry import configure_logging


def configure_cli_logging(args: argparse.Namespace) -> None:
    """``--log-format`` and ``--log-level`` for every command; for ``gpudra up`` warnings and errors still show on
    the console, and ``-v`` brings the whole log there too (``-vv`` at DEBUG)."""
    level = args.log_level or "INFO"
    if args.command != "up":
        configure_logging(args.log_format or "console", level)
        return
    up_directory_ready(Path(args.kubeconfig))  # its log file goes beside the kubeconfig, first
    if args.verbose >= 2 and not args.log_level:
        level = "DEBUG"
    console = level if args.verbose else "WARNING"
    configure_logging(args.log_format or "console", level, console_level=console, log_file=up_log_file(args))
