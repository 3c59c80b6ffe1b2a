"""Nothing outlives ``gpudra up``: killed with SIGKILL, which lets it run no clean-up, it leaves no process behind,
neither on the real control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager) nor on the
embedded one with its API server and agents in processes of their own."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from clusterkit import eventually


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize(
    ("flags", "at_least"),
    [
        (["--control-plane", "kubernetes"], 4),  # etcd and the three kube-* binaries
        (["--api-server-process", "--agent-processes"], 3),  # the API server and two agents
    ],
    ids=["kubernetes", "embedded"],
)
async def test_sigkill_leaves_no_process_behind(flags: list[str], at_least: int, tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpudra", "up", *flags, "--nodes", "dgx-h100:2",
        "--kubeconfig", str(tmp_path / "kubeconfig"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert process.stdout is not None
    seen: list[str] = []
    try:
        while not seen or "Ctrl-C stops it." not in seen[-1]:
            line = await asyncio.wait_for(process.stdout.readline(), 180)
            assert line, "gpudra up ended before it was up:\n" + "".join(seen)
            seen.append(line.decode())
        children = descendants(process.pid)
        assert len(children) >= at_least, children
    finally:
        os.kill(process.pid, signal.SIGKILL)
        await process.wait()

    async def all_ended() -> bool:
        return not any(alive(pid) for pid in children)

    await eventually(
        all_ended, timeout=30, what=f"the children of a killed gpudra up ({sorted(children)}) ended"
    )
