"""A real kubelet for a simulated node (``gpudra up --control-plane kubernetes --real-kubelet N``).

The kubelet of the same Kubernetes version as the control plane runs over gpudra-fake-cri, Kubernetes' own fake
container runtime (hack/kubernetes/fakecri): sandboxes and containers are accepted and reported running, nothing is
executed, and every sandbox and container call is recorded (``cri_calls``) with the config the kubelet sent, CDI
devices included. The kubelet registers its Node with the node's client certificate, finds the agent's kubelet
plugin in its own ``plugins_registry`` directory and calls NodePrepareResources, NodeUnprepareResources and the
health stream on its own schedule. The fake runtime outlives a kubelet restart, as containerd does.

The kubelet shares the machine with everything else, so it runs in a mount namespace of its own
(``unshare --mount``): the mounts it makes (its root directory made rshared, tmpfs for projected volumes) vanish
with it, and ``/proc/sys`` is read-only there except for private copies of the kernel settings it sets at start
(``vm.overcommit_memory``, ``kernel.panic`` ...), which it would otherwise change for the whole machine. That needs
root, as a kubelet does anyway.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from gpudra.cluster.kubernetes.binaries import Binaries
from gpudra.cluster.kubernetes.controlplane import KubernetesControlPlane
from gpudra.cluster.kubernetes.flags import KubeletPaths, kubelet_args, kubelet_config
from gpudra.cluster.processes import ManagedProcess, ProcessFailed, free_port
from gpudra.config import AgentSettings
from gpudra.errors import ConfigurationError, NotFoundError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import NODES
from gpudra.telemetry import get_logger

log = get_logger(__name__)

KERNEL_SETTINGS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
"""What the kubelet's container manager sets at start (setupKernelTunables) unless protectKernelDefaults; any
other write to /proc/sys fails in its namespace, so a version that sets more stops with a message naming it."""


async def registered_node(client: KubeClient, name: str, log_file: Path, *, timeout: float) -> dict[str, Any]:
    """The Node ``name`` once its kubelet has registered it; ProcessFailed naming the kubelet's log after
    ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await client.get_raw(NODES, name)
        except NotFoundError:
            if time.monotonic() > deadline:
                raise ProcessFailed(
                    f"the kubelet of {name} did not register its Node within {timeout:.0f}s; see {log_file}"
                ) from None
        await asyncio.sleep(0.2)


def registration_labels(node: dict[str, Any]) -> dict[str, str]:
    """The labels of a simulated Node a kubelet may register itself: the kubelet sets ``kubernetes.io/hostname``,
    ``os`` and ``arch`` on its own and refuses other ``kubernetes.io`` and ``k8s.io`` labels in --node-labels."""
    labels = node["metadata"].get("labels") or {}
    return {key: str(value) for key, value in labels.items() if _kubelet_may_set(key)}


def _kubelet_may_set(label: str) -> bool:
    prefix, slash, _ = label.partition("/")
    return not slash or not prefix.endswith(("kubernetes.io", "k8s.io"))


def registration_taints(node: dict[str, Any]) -> list[str]:
    """``--register-with-taints`` entries (``key=value:Effect``) of a simulated Node's taints."""
    return [
        f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in (node.get("spec") or {}).get("taints") or []
    ]


def node_ip() -> str:
    """This machine's IPv4 address on its default route (connecting a UDP socket sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 9))
        except OSError as exc:
            raise ConfigurationError(
                f"a real kubelet needs a non-loopback IPv4 address for its Node, and this machine has no "
                f"default route ({exc})"
            ) from exc
        address: str = probe.getsockname()[0]
        return address


def namespaced(argv: list[str], root_dir: Path, sysctls: Path) -> list[str]:
    """``argv`` run in a private mount namespace where /proc/sys is read-only but for private copies of
    KERNEL_SETTINGS in ``sysctls``, and /var/lib/kubelet is ``root_dir`` (the device-plugin socket's path is
    fixed there whatever --root-dir says; /var/lib/kubelet is created, empty, as the mount point)."""
    script = [
        "set -e",
        "mkdir -p /var/lib/kubelet",
        f"mount --bind {shlex.quote(str(root_dir))} /var/lib/kubelet",
        "mount --bind /proc/sys /proc/sys",
        "mount -o remount,bind,ro /proc/sys",
    ]
    for setting in KERNEL_SETTINGS:
        copy = sysctls / setting.replace("/", ".")
        script.append(f"mount --bind {shlex.quote(str(copy))} /proc/sys/{setting}")
    script.append('exec "$@"')
    unshare = shutil.which("unshare")
    if unshare is None:
        raise ConfigurationError(
            "a real kubelet runs in a mount namespace of its own: `unshare` is not on PATH"
        )
    return [
        unshare,
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        "; ".join(script),
        "kubelet",
        *argv,
    ]


class RealKubelet:
    """One simulated node's kubelet and fake runtime; start, kill and start again over the same directories."""

    def __init__(
        self, node: dict[str, Any], root: Path, binaries: Binaries, control_plane: KubernetesControlPlane
    ) -> None:
        if os.geteuid() != 0:
            raise ConfigurationError(
                "--real-kubelet needs root: the kubelet mounts volumes and reads cgroups"
            )
        self.name: str = node["metadata"]["name"]
        self.paths = KubeletPaths(root)
        logs = control_plane.layout.logs
        self.port = free_port()
        self._healthz_port = free_port()
        self.node_ip = node_ip()
        serving = control_plane.kubelet_serving_certificate(self.name, self.node_ip)
        config = kubelet_config(
            self.paths,
            address=self.node_ip,
            port=self.port,
            healthz_port=self._healthz_port,
            ca=control_plane.ca,
            serving=(serving.cert, serving.key),
            gates=control_plane.gates,
        )
        self.paths.root_dir.mkdir(parents=True, exist_ok=True)
        self.paths.config.write_text(json.dumps(config, indent=2))
        self._write_kernel_settings()
        args = kubelet_args(
            binaries.kubelet,
            self.paths,
            node=self.name,
            node_ip=self.node_ip,
            kubeconfig=control_plane.node_kubeconfig(self.name),
            labels=registration_labels(node),
        )
        taints = registration_taints(node)
        if taints:
            args.append(f"--register-with-taints={','.join(taints)}")
        self.runtime = ManagedProcess(
            f"gpudra-fake-cri {self.name}",
            [
                str(binaries.fake_cri),
                f"--socket={self.paths.cri_socket}",
                f"--record={self.paths.cri_record}",
            ],
            logs / f"fake-cri-{self.name}.log",
            f"unix://{self.paths.cri_socket}",
        )
        self.kubelet = ManagedProcess(
            f"kubelet {self.name}",
            namespaced(args, self.paths.root_dir, self.paths.sysctls),
            logs / f"kubelet-{self.name}.log",
            f"http://127.0.0.1:{self._healthz_port}/healthz",
        )
        self.starts = 0
        self._log_start = 0  # where the log of the kubelet's latest start begins

    def _write_kernel_settings(self) -> None:
        """The machine's values as they are, for the kubelet to read and overwrite in private."""
        self.paths.sysctls.mkdir(parents=True, exist_ok=True)
        for setting in KERNEL_SETTINGS:
            copy = self.paths.sysctls / setting.replace("/", ".")
            if not copy.exists():
                copy.write_text(Path("/proc/sys", setting).read_text())

    async def start(self, *, timeout: float = 60.0) -> None:
        """The fake runtime (unless it still runs), then the kubelet; ready when the kubelet's /healthz answers."""
        if not self.runtime.running:
            await self.runtime.start(timeout=timeout)
        self.starts += 1
        self._log_start = self.kubelet.log_file.stat().st_size if self.kubelet.log_file.exists() else 0
        await self.kubelet.start(timeout=timeout)
        log.info("real kubelet up", node=self.name, port=self.port, root=str(self.paths.root_dir))

    async def wait_for_plugin(self, driver: str, *, timeout: float = 60.0) -> None:
        """Wait until the kubelet, since its latest start, has registered ``driver``'s DRA plugin. A pod that
        reaches it sooner gets "DRA driver ... is not registered" and, since the kubelet does not count that as a
        failed sync, is prepared only at its next periodic resync (about a minute later)."""
        wanted = ('"Registered DRA plugin"', f'driverName="{driver}"')
        deadline = time.monotonic() + timeout
        while True:
            with self.kubelet.log_file.open("rb") as text:
                text.seek(self._log_start)
                if any(
                    all(w in line for w in wanted)
                    for line in text.read().decode(errors="replace").splitlines()
                ):
                    return
            if time.monotonic() > deadline:
                raise ProcessFailed(
                    f"the kubelet of {self.name} did not register the {driver} plugin within {timeout:.0f}s; "
                    f"see {self.kubelet.log_file}"
                )
            await asyncio.sleep(0.1)

    async def start_and_register(self, client: KubeClient, *, timeout: float = 60.0) -> dict[str, Any]:
        """Start, then wait until the kubelet has registered its Node (read through ``client``); the Node."""
        await self.start(timeout=timeout)
        return await registered_node(client, self.name, self.kubelet.log_file, timeout=timeout)

    def plugin_settings(self, settings: AgentSettings) -> dict[str, Path]:
        """AgentSettings fields that put the node's kubelet plugins where this kubelet looks for them."""
        return {
            "plugin_dir": self.paths.plugins / settings.driver_name,
            "compute_domain_plugin_dir": self.paths.plugins / settings.compute_domain_driver_name,
            "registry_dir": self.paths.plugins_registry,
        }

    async def kill(self) -> None:
        """SIGKILL the kubelet (the fake runtime and its containers stay, as they would on a real node)."""
        await self.kubelet.stop(kill=True)

    async def stop(self) -> None:
        await self.kubelet.stop()
        await self.runtime.stop()

    def cri_calls(self) -> list[dict[str, Any]]:
        """Every sandbox and container call the fake runtime answered so far, oldest first."""
        try:
            lines = self.paths.cri_record.read_text().splitlines()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in lines if line.strip()]
