"""The ``gpudra`` command's own behaviour, outside any cluster: a bad command line is one clear line and exit status
2 before anything is contacted, the kubectl plugin offers only the commands that read a cluster, and starting the
command does not import the heavy parts (the embedded cluster, kopf, the Kubernetes client) that only some commands
need. The commands against a cluster are tested in tests/integration/test_explain.py and tests/e2e/."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpudra import cli
from gpudra.cli import PLUGIN_USAGE, kubectl_plugin
from gpudra.cli.parser import build_parser
from gpudra.errors import ConfigurationError, KubeError


def _gpudra(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpudra", *argv], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["sim", "fault", "n", "gpu-0", "xid"],
            "gpudra sim: sim fault: xid needs the XID code, e.g. `xid 79`",
        ),
        (
            ["sim", "fault", "n", "gpu-0", "ecc", "triple"],
            "gpudra sim: sim fault: ecc takes double-bit or single-bit, not 'triple'",
        ),
        (
            ["sim", "fault", "n", "gpu-0", "gpu-lost", "3"],
            "gpudra sim: sim fault: gpu-lost takes no value ('3' given)",
        ),
        (
            ["up", "--with-claims"],
            "gpudra up: --with-claims copies a real cluster's claims: give --from-cluster KUBECONFIG",
        ),
        (["explain"], "gpudra explain: give either `claim NAME`, `pod NAME` or `--file claim.yaml`"),
    ],
)
def test_bad_command_line_is_one_line_and_status_2(argv: list[str], message: str) -> None:
    done = _gpudra(*argv)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", message + "\n")


def test_sim_fault_offers_the_faults_the_simulator_knows() -> None:
    done = _gpudra("sim", "fault", "n", "gpu-0", "melt")
    assert done.returncode == 2
    assert "(choose from 'ecc', 'fabric-lost', 'gpu-lost', 'recover', 'xid')" in done.stderr


def test_kubectl_plugin_offers_only_the_reading_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert kubectl_plugin([]) == 0
    assert capsys.readouterr().out == PLUGIN_USAGE
    assert kubectl_plugin(["controller"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kubectl gpudra: unknown command 'controller'\n")
    assert "kubectl gpudra status [-o wide|json|yaml]" in err


def test_kubectl_plugin_names_itself_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        kubectl_plugin(["status", "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("usage: kubectl gpudra status ")


def test_starting_the_command_imports_no_heavy_part() -> None:
    """Every command starts by importing gpudra.cli; what only one command needs is imported when it runs."""
    probe = "import json, sys, gpudra.cli; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = set(json.loads(done.stdout))
    heavy = ["kopf", "kubernetes_asyncio", "aiohttp", "grpc", "pynvml", "yaml", "cel_expr_python"]
    heavy += [
        f"gpudra.{p}" for p in ("cluster", "controller", "agent", "kube", "allocator", "planning", "hardware")
    ]
    assert [m for m in sorted(loaded) if any(m == h or m.startswith(h + ".") for h in heavy)] == []


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """A parser and every subcommand's parser under it."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _parsers(sub)
    return found


def test_no_help_text_shows_restructuredtext_markup() -> None:
    """`--help` is read in a terminal: `code` in single backticks, as the rest of the help, never ``this``."""
    helps = {p.prog: p.format_help() for p in _parsers(build_parser())}
    assert len(helps) > 8
    marked = [prog for prog, text in helps.items() if "``" in text]
    assert not marked, marked


def test_up_takes_feature_gates_on_and_off() -> None:
    args = build_parser().parse_args(
        [
            "up",
            "--feature-gates",
            "GenericWorkload,DRAWorkloadResourceClaims=true,DRAConsumableCapacity=false",
        ]
    )
    assert args.feature_gates == (
        ("GenericWorkload", "DRAWorkloadResourceClaims"),
        ("DRAConsumableCapacity",),
    )
    assert build_parser().parse_args(["up"]).feature_gates == ((), ())


def test_up_refuses_a_feature_gate_that_is_not_on_or_off() -> None:
    done = _gpudra("up", "--feature-gates", "GenericWorkload=maybe")
    assert done.returncode == 2
    assert done.stderr.endswith(
        "gpudra up: error: argument --feature-gates: 'GenericWorkload=maybe' is not GATE, GATE=true or GATE=false\n"
    )


@pytest.mark.parametrize(
    ("flag", "value", "what"),
    [
        ("--port", "99999", "a port, 0 to 65535"),
        ("--web-port", "-2", "a port, 0 to 65535, or -1 for none"),
        ("--metrics-port", "x", "a port, 0 to 65535, or -1 for none"),
        ("--health-recovery-seconds", "-5", "a number of seconds, 0 or more"),
        ("--real-nodes", "-1", "a whole number, 0 or more"),
    ],
)
def test_a_number_out_of_range_is_a_usage_error(flag: str, value: str, what: str) -> None:
    """`gpudra up --port 99999` ended in OverflowError from the socket's bind, `--health-recovery-seconds -5` in
    pydantic's ValidationError once the first agent started."""
    done = _gpudra("up", flag, value)
    assert done.returncode == 2
    assert done.stderr.endswith(f"gpudra up: error: argument {flag}: {value!r} is not {what}\n"), done.stderr


def test_a_kubeconfig_path_gpudra_up_cannot_write_is_one_line(tmp_path: Path) -> None:
    """A --kubeconfig under a file, or naming a directory, ended in FileExistsError or IsADirectoryError."""
    (tmp_path / "a-file").write_text("")
    under_a_file = tmp_path / "a-file" / "kubeconfig"
    done = _gpudra("up", "--once", "--kubeconfig", str(under_a_file))
    assert (done.returncode, done.stderr) == (
        2,
        f"gpudra up: --kubeconfig {under_a_file}: {tmp_path}/a-file is not a directory\n",
    )
    done = _gpudra("up", "--once", "--kubeconfig", str(tmp_path))
    assert (done.returncode, done.stderr) == (
        2,
        f"gpudra up: --kubeconfig {tmp_path}: {tmp_path} is a directory\n",
    )


def test_a_recording_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    target = tmp_path / "no-such-dir" / "gpus.json"
    done = _gpudra("hardware", "record", "--simulated-profile", "l4x4", "-o", str(target))
    assert (done.returncode, done.stderr) == (
        2,
        f"gpudra hardware: cannot write {target}: No such file or directory\n",
    )


def test_parts_that_fail_together_with_gpudras_own_errors_are_one_line_each(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A process's parts run in task groups: their errors arrive grouped. Each of gpudra's own is one line (a 401
    or 403 of the agent's API calls used to end it in an exception group traceback); anything else is a bug, and
    its traceback shows."""

    async def failing(args: argparse.Namespace) -> int:
        raise ExceptionGroup(
            "parts",
            [
                KubeError("get nodes/n: 403 Forbidden: nodes is forbidden"),
                ExceptionGroup("inner", [KubeError("get nodes/n: 403 Forbidden: nodes is forbidden")]),
                ConfigurationError("GPUDRA_CDI_DIR: /x is not a directory"),
            ],
        )

    monkeypatch.setattr(cli, "configure_cli_logging", lambda args: None)  # this process's log is pytest's
    monkeypatch.setitem(cli.RUNNERS, "status", failing)
    assert cli.main(["status"]) == 2
    assert capsys.readouterr().err == (
        "gpudra status: get nodes/n: 403 Forbidden: nodes is forbidden\n"
        "gpudra status: GPUDRA_CDI_DIR: /x is not a directory\n"
    )

    async def buggy(args: argparse.Namespace) -> int:
        raise ExceptionGroup("parts", [KubeError("get nodes/n: 403"), KeyError("oops")])

    monkeypatch.setitem(cli.RUNNERS, "status", buggy)
    with pytest.raises(ExceptionGroup):
        cli.main(["status"])
