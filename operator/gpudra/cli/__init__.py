"""The ``gpudra`` command and the ``kubectl-gpudra`` plugin (the console scripts of pyproject.toml): parse the
command line (``parser.py``), set up logging (``logsetup.py``) and run the command's module: ``up``, ``sim``,
``processes`` (agent, imex-daemon, controller), ``explain``, ``status``, ``hardware``.

The command modules import what a command needs inside its runner, so that importing this package stays cheap:
``kubectl gpudra status`` should not wait for the embedded cluster or kopf to import, nor an agent pod load them."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from gpudra.cli.explain import explain_command
from gpudra.cli.hardware import hardware_command
from gpudra.cli.logsetup import configure_cli_logging
from gpudra.cli.parser import build_parser
from gpudra.cli.processes import agent_command, controller_command, imex_daemon_command
from gpudra.cli.sim import sim_command
from gpudra.cli.status import status_command
from gpudra.cli.up import up_command
from gpudra.errors import GpudraError

RUNNERS: dict[str, Callable[[argparse.Namespace], Coroutine[Any, Any, int]]] = {
    "up": up_command,
    "agent": agent_command,
    "imex-daemon": imex_daemon_command,
    "controller": controller_command,
    "explain": explain_command,
    "status": status_command,
    "hardware": hardware_command,
    "sim": sim_command,
}

PLUGIN_COMMANDS = ("explain", "status")
PLUGIN_USAGE = """usage: kubectl gpudra explain pod NAME | claim NAME | --file claim.yaml [-n NAMESPACE] [-o wide|json]
       kubectl gpudra status [-o wide|json|yaml]

gpudra as a kubectl plugin: why a pod's claims are pending (or whether a claim would fit, and where), and the fleet's
GPUs, MIG devices, allocated and unhealthy devices. The cluster is kubectl's: $KUBECONFIG or --kubeconfig.
`kubectl gpudra explain --help` and `kubectl gpudra status --help` list every option.
"""


def kubectl_plugin(argv: list[str] | None = None) -> int:
    """``kubectl-gpudra``: kubectl runs the first ``kubectl-gpudra`` on PATH with the words after ``gpudra``,
    so ``kubectl gpudra explain pod NAME`` is ``gpudra explain pod NAME``. Only the commands that read a
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
    """``gpudra``: a configuration error is one line on standard error and exit status 2; Ctrl-C is 130."""
    args = build_parser(prog).parse_args(argv)
    try:
        configure_cli_logging(args)
        return asyncio.run(RUNNERS[args.command](args))
    except GpudraError as exc:
        print(f"{prog} {args.command}: {exc}", file=sys.stderr)
        return 2
    except BaseExceptionGroup as group:
        # the parts a process runs at once failed together: each of gpudra's own errors is one line
        errors = _gpudra_errors(group)
        if errors is None:
            raise
        for error in errors:
            print(f"{prog} {args.command}: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _gpudra_errors(group: BaseExceptionGroup[BaseException]) -> list[BaseException] | None:
    """The errors of ``group`` when every one is gpudra's own (each said once), else None: anything else is a
    bug whose traceback must show."""
    matched, rest = group.split(GpudraError)
    if matched is None or rest is not None:
        return None
    return list({str(exc): exc for exc in _leaves(matched)}.values())


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]
