"""``gpudra up --real-nodes`` as a user runs it: a mistake is one sentence, never a traceback; killed with SIGKILL,
it leaves no process behind (its watchdog ends the nodes, their containers and the control plane), no link on the
machine and no temporary node directory (containerd's store, about 1 GB a node)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

from clusterkit import eventually
from gpudra.cluster.realnode.cgroups import CONTROL_PLANE, NodeCgroup
from gpudra.cluster.realnode.fleet import cluster_id

GPUDRA = [sys.executable, "-m", "gpudra"]


async def gpudra(*args: str, timeout: float = 60) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        *GPUDRA, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode is not None
    return process.returncode, out.decode()


async def test_real_nodes_without_the_real_control_plane_is_one_sentence(tmp_path: Path) -> None:
    code, out = await gpudra(
        "up", "--real-nodes", "1", "--kubeconfig", str(tmp_path / "kubeconfig"), "--once"
    )
    assert code != 0
    assert "--real-nodes needs --control-plane kubernetes" in out
    assert "Traceback" not in out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"


async def links() -> set[str]:
    """The machine's network interfaces."""
    listing = await asyncio.create_subprocess_exec("ip", "-o", "link", stdout=asyncio.subprocess.PIPE)
    out, _ = await listing.communicate()
    return {line.split(":")[1].strip().split("@")[0] for line in out.decode().splitlines()}


def node_root(pids: list[int]) -> Path:
    """The node's directory on the machine: where its containerd's configuration is."""
    for pid in pids:
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"--config" in argv and argv[-2].endswith(b"containerd.toml"):
                return Path(os.fsdecode(argv[-2])).parent
    raise AssertionError(f"no containerd among {pids}")


async def test_sigkill_leaves_no_process_no_link_and_no_temporary_directory_behind(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    before = await links()
    process = await asyncio.create_subprocess_exec(
        *GPUDRA, "up", "--control-plane", "kubernetes", "--real-nodes", "1", "--nodes", "dgx-h100:1",
        "--kubeconfig", str(kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert process.stdout is not None
    seen: list[str] = []
    try:
        while not seen or "Ctrl-C stops it." not in seen[-1]:
            line = await asyncio.wait_for(process.stdout.readline(), 180)
            assert line, "gpudra up ended before it was up:\n" + "".join(seen)
            seen.append(line.decode())
        cluster = cluster_id(tmp_path)
        members = {m: NodeCgroup.on_this_machine(cluster, m) for m in ("dgx-h100-0", CONTROL_PLANE)}
        pids = {m: cgroup.pids() for m, cgroup in members.items()}
        # the node: its namespaces, containerd, the kubelet, shims, the agent's and the controller's containers
        assert len(pids["dgx-h100-0"]) >= 8, pids
        assert len(pids[CONTROL_PLANE]) == 4  # etcd, kube-apiserver, kube-scheduler, kube-controller-manager
        assert len(await links() - before) == 1  # the node's link
        root = node_root(pids["dgx-h100-0"])
        # tmp_path is too deep for the node's socket paths: the node lives in a temporary directory of its own
        assert root.parent.name.startswith("gpudra-") and not root.is_relative_to(tmp_path), root
    finally:
        process.send_signal(signal.SIGKILL)
        await process.wait()

    async def all_ended() -> bool:
        return not any(alive(pid) for group in pids.values() for pid in group)

    await eventually(all_ended, timeout=60)
    await eventually(lambda: not any(c.listing.exists() for c in members.values()), timeout=30)

    async def links_gone() -> bool:
        return (
            await links() == before
        )  # the kernel tears a network namespace down a moment after its last process

    await eventually(links_gone, timeout=30, what="the node's link gone")
    await eventually(lambda: not root.parent.exists(), timeout=60, what=f"{root.parent} removed")
