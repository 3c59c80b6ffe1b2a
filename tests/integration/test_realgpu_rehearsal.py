"""The real-GPU check (hack/realgpu) rehearsed on simulated GPUs, through its run script as a user starts it: every
step passes and the JSON summary says so, on stdout and in its file; a GPU with MIG mode on stops it before the
agent starts, unless --allow-mig-on."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

RUN = Path(__file__).resolve().parents[2] / "hack" / "realgpu" / "run"
pytestmark = pytest.mark.timeout(120)


async def run_check(out: Path, *args: str) -> tuple[int, dict[str, Any]]:
    """``hack/realgpu/run`` with this test's Python (the environment that has gpudra); exit code and summary."""
    process = await asyncio.create_subprocess_exec(
        str(RUN), "--backend", "simulated", "--out", str(out), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "REALGPU_PYTHON": sys.executable},
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=100)
    assert process.returncode is not None
    summary = json.loads(stdout)
    assert json.loads((out / "summary.json").read_text()) == summary, stderr.decode()
    return process.returncode, summary


def statuses(summary: dict[str, Any]) -> dict[str, str]:
    return {s["name"]: s["status"] for s in summary["steps"]}


def step(summary: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in summary["steps"] if s["name"] == name)


async def test_the_rehearsal_passes_every_step_and_leaves_nothing_behind(tmp_path: Path) -> None:
    code, summary = await run_check(tmp_path, "--simulated-profile", "l4x4", "--health-seconds", "2")

    assert summary["result"] == "pass", json.dumps(summary, indent=1)
    assert code == 0
    assert statuses(summary) == {
        name: "pass"
        for name in (
            "record", "mig-mode", "cluster", "agent-start", "slices", "allocate", "prepare", "cdi-device-nodes",
            "unprepare", "health-watch", "agent-stop",
        )
    }  # fmt: skip
    recorded = [g["uuid"] for g in step(summary, "record")["gpus"]]
    slices = step(summary, "slices")
    assert slices["names"] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert slices["first_gpu"]["attributes"]["productName"] == {"string": "NVIDIA L4"}
    (result,) = step(summary, "allocate")["results"]
    assert result["pool"] == "realgpu-node"
    (prepared,) = step(summary, "prepare")["devices"]
    assert prepared["device"] == result["device"]
    cdi = step(summary, "cdi-device-nodes")
    assert any(path.endswith("/dev/nvidiactl") for path in cdi["device_nodes"])
    assert cdi["visible_devices"] in recorded
    assert step(summary, "health-watch")["last"] == {"HEALTHY": 4}
    assert step(summary, "agent-stop")["exit_code"] == 0
    assert (tmp_path / "recording.json").exists() and (tmp_path / "agent.log").exists()


async def test_a_gpu_with_mig_on_stops_the_check_before_the_agent_starts(tmp_path: Path) -> None:
    code, summary = await run_check(tmp_path, "--simulated-profile", "dgx-a100", "--health-seconds", "1")

    assert code == 1
    assert summary["failed"] == ["mig-mode"]
    mig = step(summary, "mig-mode")
    assert len(mig["gpus_with_mig_on"]) == 8 and "not started" in mig["refused"]
    assert statuses(summary)["agent-start"] == "skip"
    assert not (tmp_path / "agent.log").exists()


async def test_allowed_with_mig_on_it_prepares_a_mig_device(tmp_path: Path) -> None:
    code, summary = await run_check(
        tmp_path, "--simulated-profile", "dgx-a100", "--allow-mig-on", "--health-seconds", "1"
    )

    assert summary["result"] == "pass", json.dumps(summary, indent=1)
    assert code == 0
    assert step(summary, "mig-mode")["allowed"] == "--allow-mig-on"
    allocated = step(summary, "allocate")
    assert allocated["device_class"] == "mig.nvidia.com"
    nodes = step(summary, "cdi-device-nodes")["device_nodes"]
    assert any("/dev/nvidia-caps/nvidia-cap" in path for path in nodes)


async def test_device_nodes_missing_on_the_host_fail_their_step_and_the_agent_still_stops(
    tmp_path: Path,
) -> None:
    empty_root = tmp_path / "driver-root"
    # a dev of its own, so that CDI specs name the nodes under it, not under /dev
    (empty_root / "dev").mkdir(parents=True)
    code, summary = await run_check(
        tmp_path / "out",
        "--simulated-profile",
        "l4x4",
        "--driver-root",
        str(empty_root),
        "--health-seconds",
        "1",
    )

    assert code == 1
    assert summary["failed"] == ["cdi-device-nodes"]
    cdi = step(summary, "cdi-device-nodes")
    assert cdi["device_nodes"][f"{empty_root}/dev/nvidiactl"] == "missing"
    assert statuses(summary)["unprepare"] == statuses(summary)["agent-stop"] == "pass"
