"""A real node's cgroup: everything the node runs (its namespaces' holder, containerd, the kubelet, the shims and
every container) lives under ``/gpudra/<cluster>/<node>`` in each cgroup hierarchy of the machine, so that the
node can be ended as a whole, whoever is left (a shim outlives containerd by design; a container outlives its
shim), and nothing of it stays behind. The control plane of a cluster with real nodes lives beside them, in
``/gpudra/<cluster>/control-plane``.

Daemons join ``<node>/system`` (their processes are written into its ``cgroup.procs``); the kubelet is given
``<node>`` as its ``cgroupRoot`` and keeps its pods under ``<node>/kubepods``. cgroup v1 (one hierarchy per
controller) and v2 (one unified hierarchy) are both handled; on v1 the ``pids`` hierarchy, which every process is
in, is the one that lists them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from gpudra.errors import ConfigurationError

MOUNTINFO = Path("/proc/self/mountinfo")
SYSTEM = "system"


CONTROL_PLANE = "control-plane"


def joining(procs: Path, argv: list[str]) -> list[str]:
    """``argv`` started in the cgroup whose ``cgroup.procs`` is ``procs`` (its shell joins, then execs it)."""
    return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(procs), *argv]


def cgroup_mounts(mountinfo: str) -> dict[str, Path]:
    """Controller (``cpu``, ``pids``, ... ``name=systemd``; ``""`` for v2's unified hierarchy) -> mount point,
    from the text of /proc/self/mountinfo."""
    mounts: dict[str, Path] = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        if len(after) < 3:
            continue
        fstype, options = after[0], after[2].split(",")
        if fstype == "cgroup2":
            mounts[""] = Path(fields[4])
        elif fstype == "cgroup":
            for option in options:
                if (option not in ("rw", "ro") and "=" not in option) or option.startswith("name="):
                    mounts[option] = Path(fields[4])
    return mounts


@dataclass(frozen=True)
class NodeCgroup:
    """``/gpudra/<cluster>/<node>`` in every hierarchy of ``mounts``."""

    cluster: str
    node: str
    mounts: dict[str, Path]

    @classmethod
    def on_this_machine(cls, cluster: str, node: str) -> NodeCgroup:
        mounts = cgroup_mounts(MOUNTINFO.read_text())
        if set(mounts) != {""} and "pids" not in mounts:
            raise ConfigurationError(
                "a real node needs the cgroup v2 hierarchy or cgroup v1's pids controller mounted under "
                f"/sys/fs/cgroup, and this machine has neither (cgroup mounts: {sorted(mounts) or 'none'})"
            )
        return cls(cluster, node, mounts)

    @property
    def path(self) -> str:
        """The kubelet's ``cgroupRoot``."""
        return f"/gpudra/{self.cluster}/{self.node}"

    @property
    def unified(self) -> bool:
        """cgroup v2 alone (a hybrid machine, v2 mounted beside v1's controllers, runs its containers on v1)."""
        return set(self.mounts) == {""}

    def _roots(self) -> list[Path]:
        """Each distinct hierarchy (v1 may mount several controllers together)."""
        return sorted({self.mounts[""]} if self.unified else {p for c, p in self.mounts.items() if c})

    def _directories(self) -> list[Path]:
        return [root / self.path.lstrip("/") for root in self._roots()]

    @property
    def listing(self) -> Path:
        """The node's directory in the hierarchy that lists every process."""
        root = self.mounts[""] if self.unified else self.mounts["pids"]
        return root / self.path.lstrip("/")

    @property
    def system_procs(self) -> Path:
        """``cgroup.procs`` of ``<node>/system`` in the listing hierarchy: a process written there joins it."""
        return self.listing / SYSTEM / "cgroup.procs"

    def create(self) -> None:
        """Create the node's cgroup and its ``system`` child everywhere. In v1's cpuset hierarchy a new cgroup
        has no CPUs or memory nodes until given its parent's; in v2 each level passes its controllers on to its
        children (the kubelet's pods)."""
        for root in self._roots():
            directory = root
            for part in [*self.path.strip("/").split("/"), SYSTEM]:
                if self.unified:
                    _enable_controllers(directory)
                directory = directory / part
                _make(directory)

    def pids(self) -> list[int]:
        """Every process in the node's cgroup and below."""
        found: list[int] = []
        if not self.listing.exists():
            return found
        for procs in self.listing.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                found += [int(line) for line in procs.read_text().split()]
        return found

    def kill(self, *, timeout: float = 10.0) -> list[int]:
        """SIGKILL everything in the node's cgroup until none is left, then remove the cgroups; the PIDs
        killed. A process forked meanwhile is in the cgroup too, so it is found on the next pass."""
        killed: list[int] = []
        kill_file = self.listing / "cgroup.kill"
        deadline = time.monotonic() + timeout
        while pids := self.pids():
            if self.unified and kill_file.exists():
                with contextlib.suppress(OSError):
                    kill_file.write_text("1")
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            killed += [p for p in pids if p not in killed]
            if time.monotonic() > deadline:
                raise ConfigurationError(
                    f"processes {sorted(pids)} of real node {self.node} did not end after SIGKILL"
                )
            time.sleep(0.05)
        self.remove()
        return killed

    def remove(self) -> None:
        """Remove the node's (empty) cgroups, deepest first, and the cluster's when it has no node left. A
        cgroup whose last process is still exiting is busy for a moment: it is tried again."""
        for directory in self._directories():
            if not directory.exists():
                continue
            for child in sorted(
                (d for d in directory.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True
            ):
                _remove(child)
            _remove(directory)
            for parent in (directory.parent, directory.parent.parent):
                with contextlib.suppress(OSError):
                    parent.rmdir()  # only when no other node or cluster is left in it


def _make(directory: Path) -> None:
    if directory.exists():
        return
    directory.mkdir()
    for name in ("cpuset.cpus", "cpuset.mems"):
        own, parent = directory / name, directory.parent / name
        if own.exists() and parent.exists() and not own.read_text().strip():
            own.write_text(parent.read_text())


def _enable_controllers(level: Path) -> None:
    """v2: ``level`` passes its available controllers on to its children."""
    controllers = (level / "cgroup.controllers").read_text().split()
    with contextlib.suppress(OSError):
        (level / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in controllers))


def _remove(directory: Path) -> None:
    deadline = time.monotonic() + 5
    while True:
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
