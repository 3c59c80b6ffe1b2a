"""A real node's namespaces: mount, network and UTS, held by a process of its own, so that containerd and the
kubelet can be stopped and started again inside them (a restart keeps the node's pods, mounts and network).

The node sees the standard paths of a node, each bound to a directory of its own under the node's root, so that
gpudra's chart installs with its default host paths and the runtimes read their usual places:

- ``/run`` is a fresh tmpfs (the node's netns pins, runc state, anything a daemon leaves in /run vanish with it),
  where ``/run/containerd``, ``/run/cdi`` (= ``/var/run/cdi``), ``/run/nvidia/driver`` (the simulated GPUs'
  driver root) and ``/run/gpudra/simulated`` (their state) are bound from the node's root;
- ``/var/lib/kubelet`` and ``/var/log/containers`` are bound from the node's root (their empty mount points are
  created on the machine when missing, the only trace a node leaves there);
- ``/proc/sys`` is read-only but for ``/proc/sys/net`` (the node's own network namespace) and private copies of the
  kernel settings the kubelet sets at start, which it would otherwise change for the whole machine.

Its network namespace has the node's end of a veth pair (``network.NodeNetwork``); the machine's end and its route
to the node's pods go away with the namespace.
"""

from __future__ import annotations

import asyncio
import shlex
import shutil
from pathlib import Path

from gpudra.cluster.kubernetes.realkubelet import KERNEL_SETTINGS
from gpudra.cluster.processes import ManagedProcess, ProcessFailed
from gpudra.cluster.realnode.cgroups import NodeCgroup, joining
from gpudra.cluster.realnode.network import NodeNetwork
from gpudra.errors import ConfigurationError

REQUIRED_COMMANDS = {
    "unshare": "util-linux",
    "nsenter": "util-linux",
    "ip": "iproute2",
    "sleep": "coreutils",
}


def require_commands() -> dict[str, str]:
    """Command -> its path, or one sentence naming what is missing and the Debian package that has it."""
    found = {command: shutil.which(command) for command in REQUIRED_COMMANDS}
    missing = sorted(command for command, path in found.items() if path is None)
    if missing:
        packages = sorted({REQUIRED_COMMANDS[c] for c in missing})
        raise ConfigurationError(
            f"a real node needs {', '.join(missing)} on PATH (Debian: apt-get install {' '.join(packages)})"
        )
    return {command: str(path) for command, path in found.items()}


class NodeDirs:
    """Where one real node's files live, all under ``root`` (the host side of the node's standard paths)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.kubelet = root / "kubelet"
        self.containers_log = root / "log" / "containers"
        self.run = root / "run"  # /run/containerd: containerd's state and socket
        self.cdi = root / "cdi"
        self.driver_root = root / "driver"
        self.simulated = root / "simulated"
        self.containerd_root = root / "containerd"
        self.cni_conf = root / "cni" / "net.d"
        self.cni_state = root / "cni" / "ipam"
        self.sysctls = root / "sysctl"
        self.ready = root / "namespaces-ready"

    @property
    def containerd_socket(self) -> Path:
        """The node's /run/containerd/containerd.sock, as the machine sees it."""
        return self.run / "containerd.sock"

    def binds(self) -> list[tuple[Path, str]]:
        """(host directory, path in the node) of every bind mount, /run's after /run's tmpfs."""
        return [
            (self.run, "/run/containerd"),
            (self.cdi, "/run/cdi"),
            (self.driver_root, "/run/nvidia/driver"),
            (self.simulated, "/run/gpudra/simulated"),
            (self.kubelet, "/var/lib/kubelet"),
            (self.containers_log, "/var/log/containers"),
        ]


def namespace_script(dirs: NodeDirs, hostname: str) -> str:
    """What the holder runs in the node's new namespaces before it waits: the mounts, the hostname, loopback up,
    IPv4 forwarding on in the node (its bridge to its link), the kernel settings made private, then ready."""
    q = shlex.quote
    lines = ["set -e", "mount -t tmpfs -o mode=755 tmpfs /run"]
    for source, target in dirs.binds():
        lines += [f"mkdir -p {q(target)}", f"mount --bind {q(str(source))} {q(target)}"]
    lines += [
        f"hostname {q(hostname)}",
        "ip link set lo up",
        "echo 1 > /proc/sys/net/ipv4/ip_forward",
        "mount --bind /proc/sys /proc/sys",
        "mount -o remount,bind,ro /proc/sys",
        "mount --bind /proc/sys/net /proc/sys/net",
        "mount -o remount,bind,rw /proc/sys/net",
    ]
    for setting in KERNEL_SETTINGS:
        copy = dirs.sysctls / setting.replace("/", ".")
        lines.append(f"mount --bind {q(str(copy))} /proc/sys/{setting}")
    lines += [f"touch {q(str(dirs.ready))}", "exec sleep infinity"]
    return "\n".join(lines)


class NodeSandbox:
    """The namespaces of one real node and the processes that run in them."""

    def __init__(
        self, name: str, dirs: NodeDirs, network: NodeNetwork, cgroup: NodeCgroup, logs: Path
    ) -> None:
        self.name = name
        self.dirs = dirs
        self.network = network
        self.cgroup = cgroup
        self._commands = require_commands()
        self.holder = ManagedProcess(
            f"namespaces of {name}",
            self.joined(
                [
                    self._commands["unshare"],
                    "--mount",
                    "--net",
                    "--uts",
                    "--propagation",
                    "private",
                    "--",
                    "sh",
                    "-c",
                    namespace_script(dirs, name),
                ]
            ),
            logs / f"node-{name}.log",
            "",
            ready=lambda: dirs.ready.exists(),
        )

    @property
    def pid(self) -> int:
        process = self.holder.process
        if process is None or process.returncode is not None:
            raise ProcessFailed(f"the namespaces of real node {self.name} are gone")
        return process.pid

    def joined(self, argv: list[str]) -> list[str]:
        """``argv`` started in the node's cgroup (``<node>/system``)."""
        return joining(self.cgroup.system_procs, argv)

    def inside(self, argv: list[str]) -> list[str]:
        """``argv`` run in the node's namespaces and cgroup (ManagedProcess argv)."""
        return self.joined(
            [self._commands["nsenter"], f"--target={self.pid}", "--mount", "--net", "--uts", "--", *argv]
        )

    async def start(self, *, timeout: float = 30.0) -> None:
        for directory in (self.dirs.root, self.dirs.sysctls, *(source for source, _ in self.dirs.binds())):
            directory.mkdir(parents=True, exist_ok=True)
        self._write_kernel_settings()
        self.dirs.ready.unlink(missing_ok=True)
        self.cgroup.create()
        await self.holder.start(timeout=timeout)
        await self._link()

    def _write_kernel_settings(self) -> None:
        """The machine's values as they are, for the kubelet to read and overwrite in private."""
        for setting in KERNEL_SETTINGS:
            copy = self.dirs.sysctls / setting.replace("/", ".")
            if not copy.exists():
                copy.write_text(Path("/proc/sys", setting).read_text())

    async def _link(self) -> None:
        """The veth pair between the machine and the node, addressed and routed (network.py)."""
        ip, net = self._commands["ip"], self.network
        host = [
            [
                ip,
                "link",
                "add",
                net.host_link,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                str(self.pid),
            ],
            [ip, "addr", "add", f"{net.host_address}/30", "dev", net.host_link],
            [ip, "link", "set", net.host_link, "up"],
        ]
        node = [
            [ip, "addr", "add", f"{net.node_address}/30", "dev", "eth0"],
            [ip, "link", "set", "eth0", "up"],
            [ip, "route", "add", "default", "via", net.host_address],
        ]
        for argv in host:
            await run(argv)
        for argv in node:
            await run([self._commands["nsenter"], f"--target={self.pid}", "--net", "--", *argv])
        await run([ip, "route", "add", net.pod_subnet, "via", net.node_address])

    async def stop(self) -> list[int]:
        """End every process of the node (its containers too) and remove its cgroups; the PIDs killed."""
        killed = await asyncio.to_thread(self.cgroup.kill)
        await self.holder.stop(kill=True)
        return killed


async def run(argv: list[str], *, stdin: bytes | None = None) -> str:
    """Run a command to its end; its output, or ConfigurationError quoting it."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate(stdin)
    text = out.decode(errors="replace").strip()
    if process.returncode != 0:
        raise ConfigurationError(f"`{shlex.join(argv)}` failed ({process.returncode}): {text}")
    return text
