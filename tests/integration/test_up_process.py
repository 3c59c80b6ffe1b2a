"""`gpudra up` as a user runs it: metrics of the fleet on an HTTP endpoint, clean shutdown on SIGTERM and SIGINT,
and a clear error for a bad --nodes value."""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import pytest

from gpudra.cluster.fleet import parse_fleet
from gpudra.cluster.up import EmbeddedCluster, UpOptions


async def test_metrics_endpoint_reports_devices_per_node_and_type(tmp_path: Path) -> None:
    options = UpOptions(
        nodes=parse_fleet("l4x4:1,dgx-a100:1", {"l4x4", "dgx-a100"}),
        kubeconfig=tmp_path / "kc",
        metrics_port=0,
    )
    cluster = EmbeddedCluster(options)
    await cluster.start()
    try:
        async with aiohttp.ClientSession() as session, session.get(cluster.metrics_url) as response:
            text = await response.text()
    finally:
        await cluster.stop()
    assert 'gpudra_devices_published{driver="gpu.nvidia.com",node="l4x4-0",profile="",type="gpu"} 4.0' in text
    assert (
        'gpudra_devices_published{driver="gpu.nvidia.com",node="dgx-a100-0",profile="1g.5gb",type="mig"} 16.0'
        in text
    )
    assert 'gpudra_resourceslices_published{driver="gpu.nvidia.com",node="l4x4-0"} 1.0' in text


async def start_up(tmp_path: Path, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpudra", "up", "--kubeconfig", str(tmp_path / "kc"), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip


async def output_until(proc: asyncio.subprocess.Process, marker: bytes, ended: str) -> bytes:
    """What ``proc`` printed up to the line with ``marker`` (``ended``: the failure if it ends first)."""
    assert proc.stdout is not None
    seen = b""
    while marker not in seen:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
        assert line, ended
        seen += line
    return seen


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_signal_shuts_down_cleanly(tmp_path: Path, sig: signal.Signals) -> None:
    proc = await start_up(tmp_path, "--nodes", "l4x4:1")
    seen = await output_until(proc, b"Ctrl-C stops it", "gpudra up ended before it was up")
    proc.send_signal(sig)
    await asyncio.wait_for(proc.wait(), timeout=30)
    assert proc.returncode == 0
    assert b"export KUBECONFIG=" in seen


async def test_a_signal_while_the_fleet_starts_stops_it_at_once(tmp_path: Path) -> None:
    """Ctrl-C or SIGTERM before the cluster is up stops what started instead of waiting for the whole start (a
    large fleet's can take minutes), and says so."""
    proc = await start_up(tmp_path, "--nodes", "dgx-h100:60")
    seen = await output_until(proc, b"[gpudra up] API server", "gpudra up ended before its API server was up")
    proc.send_signal(signal.SIGTERM)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=30)
    seen += out
    assert b"gpudra is up" not in seen, "the start went on after the signal (or was over before it)"
    assert b"Stopped by SIGTERM before the cluster was up" in seen
    assert proc.returncode == 128 + signal.SIGTERM


async def test_unknown_profile_is_a_clear_error(tmp_path: Path) -> None:
    proc = await start_up(tmp_path, "--nodes", "dgx-h999:1", "--once")
    _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 2
    assert "unknown node profile 'dgx-h999'" in err.decode()
    assert not (tmp_path / "kc").exists()


async def test_a_web_view_port_taken_stops_the_start_at_once_with_one_line(tmp_path: Path) -> None:
    """The controller's thread failed and the start waited for it to be ready until its timeout (minutes), with
    the thread's traceback printed; a SIGTERM meanwhile took as long to end it."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        proc = await start_up(tmp_path, "--nodes", "l4x4:1", "--once", "--web-port", str(port))
        _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    finally:
        taken.close()
    assert proc.returncode == 2, err.decode()
    assert (
        err.decode()
        .strip()
        .splitlines()[-1]
        .startswith(f"gpudra up: the web view cannot listen on 127.0.0.1:{port}: ")
    ), err.decode()
    assert "Traceback" not in err.decode()


async def run_once(tmp_path: Path, *args: str) -> tuple[str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpudra", "up", "--once", "--nodes", "dgx-a100:1,l4x4:1",
        "--kubeconfig", str(tmp_path / "demo" / "kc"), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if k != "COLUMNS"},
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, err.decode()[-3000:]
    return out.decode(), err.decode()


def open_files_limit(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


async def test_a_fleet_runs_in_the_open_files_its_start_asks_for(tmp_path: Path) -> None:
    """100 dgx-h100 nodes in a process that may open 600 files: the start's estimate (two a node, their plugin's
    and registration's sockets, and 256 for the rest) lets it start, and the fleet comes up inside the limit (a
    node whose agent ran out of files would never publish its slices)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpudra", "up", "--once", "--nodes", "dgx-h100:100",
        "--kubeconfig", str(tmp_path / "kc"), "--web-port", "-1", "--metrics-port", "-1",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        preexec_fn=lambda: open_files_limit(600),
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=180)
    assert proc.returncode == 0, out.decode()[-3000:]
    assert "gpudra is up: 100 nodes, 800 GPUs" in out.decode()
    assert "Too many open files" not in (tmp_path / "gpudra.log").read_text()


@pytest.mark.slow
async def test_first_run_shows_progress_then_one_summary_and_logs_to_a_file(tmp_path: Path) -> None:
    out, err = await run_once(tmp_path)
    lines = out.splitlines()
    up = next(i for i, line in enumerate(lines) if line.startswith("gpudra is up: 2 nodes, 12 GPUs"))
    stages = [line for line in lines[:up] if line.startswith("[gpudra up] ")]
    assert sorted(s.split(" (")[0].removeprefix("[gpudra up] ").split(" http")[0] for s in stages) == [
        "API server", "controller ready 2/2", "nodes registered 2/2", "slices published 2/2"
    ]  # fmt: skip
    assert f"  export KUBECONFIG={(tmp_path / 'demo' / 'kc').resolve()}" in lines[up:]
    row = next(line for line in lines[up:] if line.startswith("dgx-a100-0"))
    assert "8x NVIDIA A100-SXM4-40GB" in row  # without a terminal, whole values on the node's row
    assert "Try next" in out and "[info" not in out
    assert "[info" not in err and "succeeded" not in err, err
    log = (tmp_path / "demo" / "gpudra.log").read_text()
    assert "kubelet plugin gpu.nvidia.com serving" in log
    assert "Handler '" not in log  # kopf's per-event lines are DEBUG


@pytest.mark.slow
async def test_verbose_brings_the_log_to_the_console(tmp_path: Path) -> None:
    _, err = await run_once(tmp_path, "-v")
    assert "kubelet plugin gpu.nvidia.com serving" in err
    assert "Handler '" not in err


ROOT = Path(__file__).resolve().parents[2]


async def test_make_demo_prints_nothing_of_its_own_before_gpudra_up(tmp_path: Path) -> None:
    """`make demo` with gpudra installed: its first line is gpudra up's (make echoes none of its commands)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    shim = venv / "bin" / "gpudra"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m gpudra "$@"\n')
    shim.chmod(0o755)
    (venv / "bin" / "python").symlink_to(sys.executable)  # the demo compiles gpudra's modules first, silently
    (venv / ".installed-stamp").touch()  # newer than pyproject.toml: nothing to install
    proc = await asyncio.create_subprocess_exec(
        "make", "--no-print-directory", "-C", str(ROOT), "demo", f"VENV={venv}",
        f"ARGS=--once --nodes l4x4:1 --web-port -1 --metrics-port -1 --kubeconfig {tmp_path / 'demo' / 'kc'}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, out.decode()[-3000:]
    assert out.decode().startswith("[gpudra up] "), out.decode()[:500]


@pytest.mark.slow
async def test_the_default_fleets_table_is_on_the_first_screen(tmp_path: Path) -> None:
    """`make demo`'s first screen (#39): gpudra up's own output holds the whole fleet table within its first 20
    lines (the Makefile's install adds one line before it)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpudra", "up", "--once", "--kubeconfig", str(tmp_path / "demo" / "kc"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, out.decode()[-3000:]
    first = out.decode().splitlines()[:19]
    header = next(i for i, line in enumerate(first) if line.split()[:2] == ["NODE", "GPUS"])
    rows = [line.split()[0] for line in first[header + 1 :] if line.strip() and not line.startswith(" ")]
    assert rows[:4] == ["dgx-a100-0", "dgx-h100-0", "dgx-h100-1", "l4x4-0"], "\n".join(first)
