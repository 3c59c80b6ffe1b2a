"""One simulated node run as a real node: its namespaces (sandbox.py), containerd over runc with the CNI bridge,
gpudra's images loaded, and the kubelet of the control plane's version. gpudra's agent is not started here: its
DaemonSet runs it, once gpudra is installed by Helm (install.py). The only simulated part is the GPUs: their state
file and device nodes live in the node's directories (``/run/gpudra/simulated``, ``/run/nvidia/driver``)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from gpudra.agent.atomic_files import write_atomically
from gpudra.cluster.kubernetes.binaries import Binaries
from gpudra.cluster.kubernetes.controlplane import KubernetesControlPlane
from gpudra.cluster.kubernetes.flags import KubeletPaths, kubelet_args, kubelet_config
from gpudra.cluster.kubernetes.realkubelet import registered_node, registration_labels, registration_taints
from gpudra.cluster.processes import ManagedProcess
from gpudra.cluster.realnode.cgroups import NodeCgroup
from gpudra.cluster.realnode.containerd import SOCKET, containerd_config, import_images
from gpudra.cluster.realnode.devices import create_device_nodes, simulated_device_paths
from gpudra.cluster.realnode.network import NodeNetwork, cni_config
from gpudra.cluster.realnode.runtime import NodeRuntime
from gpudra.cluster.realnode.sandbox import NodeDirs, NodeSandbox, run
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.hardware.simulated.fake_nvml import FakeNvml
from gpudra.kube.client import KubeClient
from gpudra.telemetry import get_logger

log = get_logger(__name__)
REAL_NODE_LABEL = "gpudra.dev/real-node"
"""On real nodes' Nodes ("true"): gpudra's chart is installed on these (the rest are simulated to the kubelet)."""
KUBELET_PORT = 10250
KUBELET_HEALTHZ_PORT = 10248


class InNodePaths(KubeletPaths):
    """The kubelet's paths as it sees them in its node: its root directory is /var/lib/kubelet and its runtime
    containerd's socket; its configuration files stay under the node's root on the machine."""

    @property
    def root_dir(self) -> Path:
        return Path("/var/lib/kubelet")

    @property
    def cri_socket(self) -> Path:
        return Path(SOCKET)


class RealNode:
    """Start, restart pieces of, and end one real node."""

    def __init__(
        self,
        node: dict[str, Any],
        network: NodeNetwork,
        root: Path,
        *,
        cluster: str,
        runtime: NodeRuntime,
        binaries: Binaries,
        control_plane: KubernetesControlPlane,
    ) -> None:
        self.name: str = node["metadata"]["name"]
        self.network = network
        self.runtime = runtime
        self.dirs = NodeDirs(root)
        logs = control_plane.layout.logs
        self.sandbox = NodeSandbox(
            self.name, self.dirs, network, NodeCgroup.on_this_machine(cluster, self.name), logs
        )
        self.paths = InNodePaths(root)
        address = network.node_address
        serving = control_plane.kubelet_serving_certificate(self.name, address)
        self._config = kubelet_config(
            self.paths,
            address=address,
            port=KUBELET_PORT,
            healthz_port=KUBELET_HEALTHZ_PORT,
            ca=control_plane.ca,
            serving=(serving.cert, serving.key),
            gates=control_plane.gates,
        ) | {
            # pods get cgroups of their own under the node's (cgroups.py), so that the node ends as a whole
            "cgroupsPerQOS": True,
            "cgroupRoot": self.sandbox.cgroup.path,
            "healthzBindAddress": address,
            "podLogsDir": str(self.dirs.root / "log" / "pods"),
        }
        args = kubelet_args(
            binaries.kubelet,
            self.paths,
            node=self.name,
            node_ip=address,
            kubeconfig=control_plane.node_kubeconfig(self.name, server=control_plane.node_url),
            labels={**registration_labels(node), REAL_NODE_LABEL: "true"},
        )
        taints = registration_taints(node)
        if taints:
            args.append(f"--register-with-taints={','.join(taints)}")
        self._kubelet_args = args
        self.containerd = ManagedProcess(
            f"containerd {self.name}",
            [],
            logs / f"containerd-{self.name}.log",
            f"unix://{self.dirs.containerd_socket}",
            env={"PATH": f"{runtime.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
        )
        self.kubelet = ManagedProcess(
            f"kubelet {self.name}",
            [],
            logs / f"kubelet-{self.name}.log",
            f"http://{address}:{KUBELET_HEALTHZ_PORT}/healthz",
        )

    @property
    def state_file(self) -> Path:
        """The simulated GPUs' state (the agent's GPUDRA_SIMULATED_STATE, /run/gpudra/simulated/gpus.state)."""
        return self.dirs.simulated / "gpus.state"

    def simulate_gpus(self, gpus: FakeNvml) -> None:
        """The node's simulated GPUs: their state file, which the agent in its pod takes over, and their device
        nodes under the node's driver root."""
        self.dirs.simulated.mkdir(parents=True, exist_ok=True)
        write_atomically(self.state_file, gpus.saved_state())
        minors = [gpu.minor for gpu in NvmlBackend(self.name, nvml=gpus).read_inventory().gpus]
        create_device_nodes(self.dirs.driver_root, simulated_device_paths(minors))

    async def start_namespaces(self) -> None:
        """The node's namespaces and its link to the machine (the cluster holds its network lock meanwhile)."""
        await self.sandbox.start()

    async def start(self, client: KubeClient, *, timeout: float = 120.0) -> dict[str, Any]:
        """After :meth:`start_namespaces`: containerd with the images, then the kubelet; the Node once the kubelet
        registered it."""
        started = time.monotonic()
        self.dirs.cni_conf.mkdir(parents=True, exist_ok=True)
        (self.dirs.cni_conf / "10-gpudra.conflist").write_text(
            json.dumps(cni_config(self.network, ipam_dir=str(self.dirs.cni_state)), indent=2)
        )
        config = self.dirs.root / "containerd.toml"
        config.write_text(containerd_config(self.dirs, self.runtime, self.runtime.images))
        self.containerd.argv = self.sandbox.inside([str(self.runtime.containerd), "--config", str(config)])
        await self.containerd.start(timeout=timeout)
        await import_images(self.sandbox, self.runtime, list(self.runtime.images.archives.values()))
        self.paths.config.write_text(json.dumps(self._config, indent=2))
        await self.start_kubelet(timeout=timeout)
        registered = await registered_node(client, self.name, self.kubelet.log_file, timeout=timeout)
        log.info(
            "real node up", node=self.name, ip=self.network.node_address, seconds=time.monotonic() - started
        )
        return registered

    async def start_kubelet(self, *, timeout: float = 60.0) -> None:
        self.kubelet.argv = self.sandbox.inside(self._kubelet_args)
        await self.kubelet.start(timeout=timeout)

    async def restart_kubelet(self, *, kill: bool = True) -> None:
        """Stop the kubelet (SIGKILL by default, as a crash would) and start it again; pods keep running."""
        await self.kubelet.stop(kill=kill)
        await self.start_kubelet()

    async def restart_containerd(self, *, kill: bool = False) -> None:
        """Stop containerd (SIGTERM by default, as ``systemctl restart containerd`` does) and start it again;
        its shims and containers keep running."""
        await self.containerd.stop(kill=kill)
        await self.containerd.start()

    async def crictl(self, *args: str) -> str:
        """crictl against the node's containerd, as an operator on the node runs it (its configuration in the
        node's root: ``crictl --config <root>/crictl.yaml``)."""
        config = self.dirs.root / "crictl.yaml"
        if not config.exists():
            config.write_text(
                f"runtime-endpoint: unix://{SOCKET}\nimage-endpoint: unix://{SOCKET}\ntimeout: 30\n"
            )
        return await run(self.sandbox.inside([str(self.runtime.crictl), "--config", str(config), *args]))

    async def stop(self) -> None:
        """End the node: every process in its cgroup (the kubelet, containerd, the shims, every container)."""
        killed = await self.sandbox.stop()
        for process in (self.kubelet, self.containerd):
            await process.stop(kill=True)
        log.info("real node stopped", node=self.name, processes=len(killed))
