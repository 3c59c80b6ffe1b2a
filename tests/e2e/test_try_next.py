"""The "Try next" lines ``gpudra up`` prints (#39), run as a user types them into a new terminal: one bash that
starts in another directory, without KUBECONFIG and without gpudra's virtual environment on PATH, against the
running ``gpudra up``. Every line exits 0 (``gpudra explain`` of the pod that cannot fit exits 1, as it says) and
prints what its comment promises."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH"),
]
MARK = "@@@ exit "


@pytest.fixture
async def printed(tmp_path: Path) -> AsyncIterator[list[str]]:
    """The Try next lines of a running ``gpudra up`` started in the repository (where a clone runs `make demo`);
    it is stopped with Ctrl-C after the test."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    up = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpudra", "up", "--nodes", "dgx-h100:1,l4x4:1", "--web-port", "-1",
        "--metrics-port", "-1", "--kubeconfig", str(tmp_path / "demo" / "kubeconfig"),
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    assert up.stdout is not None
    output: list[str] = []
    try:
        while not output or output[-1] != "Ctrl-C stops it.":
            line = await asyncio.wait_for(up.stdout.readline(), 120)
            assert line, "gpudra up ended before it was up:\n" + "\n".join(output)
            output.append(line.decode().rstrip("\n"))
        heading = next(i for i, line in enumerate(output) if line.startswith("Try next"))
        yield [line.removeprefix("  ") for line in output[heading + 1 : -1]]
    finally:
        os.killpg(up.pid, signal.SIGINT)
        await asyncio.wait_for(up.communicate(), 60)


def new_terminal(home: Path) -> dict[str, str]:
    """A new terminal's environment: no KUBECONFIG, no virtual environment active (its bin not on PATH). The
    test run's PYTHONPATH stays (absolute), so that gpudra is this checkout's."""
    venv_bin = str(Path(sys.prefix) / "bin")
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d != venv_bin]
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "VIRTUAL_ENV")}
    env |= {"HOME": str(home), "PATH": os.pathsep.join(path)}
    if "PYTHONPATH" in env:
        env["PYTHONPATH"] = os.pathsep.join(
            str(Path(p).resolve()) for p in env["PYTHONPATH"].split(os.pathsep)
        )
    return env


async def run_in_one_shell(lines: list[str], home: Path) -> list[tuple[str, int, str]]:
    """Each line typed in turn into one bash: (line, its exit status, what it printed)."""
    script = "".join(f'{line}\necho "{MARK}$?"\n' for line in lines)
    bash = await asyncio.create_subprocess_exec(
        "bash", "--noprofile", "--norc", "-c", script, cwd=home, env=new_terminal(home),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(bash.communicate(), 180)
    parts = re.split(rf"^{MARK}(\d+)\n", out.decode(), flags=re.MULTILINE)
    outputs, statuses = parts[0::2], [int(status) for status in parts[1::2]]
    assert len(statuses) == len(lines), out.decode()
    return list(zip(lines, statuses, outputs, strict=False))


async def test_every_printed_line_runs_as_typed_in_a_new_terminal(printed: list[str], tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    ran = await run_in_one_shell(printed, home)
    for line, status, output in ran:
        # gpudra explain's status says whether the claim fits (1: it cannot), so a script can ask it (#32)
        expected = 1 if " explain pod too-big" in line else 0
        assert status == expected, f"{line!r} exited {status}:\n{output}"
    said = {line.split("#")[0].strip(): output for line, _, output in ran}
    assert "pod/gpu-pod created" in said["kubectl apply -f examples/gpu-pod.yaml"]
    assert "pod/gpu-pod condition met" in said["kubectl wait --for=condition=Ready pod/gpu-pod --timeout=60s"]
    assert re.search(
        r"^GPU 0: NVIDIA .+ \(UUID: GPU-[0-9a-f-]+\)$", said["kubectl logs gpu-pod"], re.MULTILINE
    )
    assert "pod/too-big created" in said["kubectl apply -f examples/gpu-pod-too-big.yaml"]
    explained = next(output for command, output in said.items() if command.endswith("explain pod too-big"))
    assert "does not fit" in explained and "needs 16 GPUs on one node" in explained
