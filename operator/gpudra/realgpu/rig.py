"""The real-GPU check's set-up: the embedded API server with a Node for this machine, and the real agent as a
process of its own with a kubeconfig of its own, its sockets, checkpoint and CDI specs in a private directory.

The agent's settings are the shipped defaults except for what keeps a shared machine's GPUs as they are, each set
explicitly so that no ``GPUDRA_*`` variable of the caller's environment can turn it on: MIG policy Static (nothing
is created or destroyed at prepare), no passthrough (no GPU is unbound from its driver), no time-sliced sharing, no
compute domains; and the node carries no MigLayout or ``nvidia.com/mig.config`` label, so no layout is applied.
Health checks only listen to NVML events. The GPUs' own MIG mode is the caller's to check first: with MIG on, the
agent's start-up recovery destroys GPU instances that hold no compute instance (see :mod:`gpudra.realgpu.check`)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gpudra.api.crdgen import CRD_MODELS, crd_for
from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.cluster.apiserver.identity import ADMIN
from gpudra.cluster.processes import ManagedProcess, free_port
from gpudra.config import AgentSettings
from gpudra.devices import load_device_classes
from gpudra.kube.client import KubeClient
from gpudra.kube.crdready import wait_served
from gpudra.kube.resources import CRDS, DEVICE_CLASSES, NAMESPACES, NODES

NAMESPACE = "gpudra-realgpu"
STOP_GRACE_SECONDS = 30.0
"""How long the agent may take to exit after SIGTERM: a pod's default termination grace period."""


@dataclass(frozen=True)
class Options:
    backend: Literal["nvml", "simulated"]
    simulated_profile: str
    node_name: str
    driver_name: str
    driver_root: Path | None  # None: / with NVML, a directory of stand-in device nodes when simulated
    health_seconds: float
    allow_mig_on: bool
    out: Path


def node_body(name: str) -> dict[str, Any]:
    """A Ready Node for this machine, as its kubelet would register it; no MIG label of any kind."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
        },
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
    }


def process_environment(settings: AgentSettings) -> dict[str, str]:
    """A ``GPUDRA_*`` variable for every setting, the defaults too: the process inherits the caller's environment,
    and a variable there must not change what these settings say."""
    return {
        f"GPUDRA_{name.upper()}": value if isinstance(value, str) else json.dumps(value)
        for name, value in settings.model_dump(mode="json", exclude_none=True).items()
    }


class Rig:
    """Start with :meth:`start_cluster`, then :meth:`start_agent`; :meth:`close` undoes whatever was started."""

    def __init__(self, options: Options) -> None:
        self.options = options
        # sockets live here: a short path under the system's temp directory (a unix socket path is short)
        self.work = Path(tempfile.mkdtemp(prefix="gpudra-realgpu-"))
        self.kubeconfig = options.out / "kubeconfig"
        self.agent_log = options.out / "agent.log"
        self.server: EmbeddedAPIServer | None = None
        self.client: KubeClient | None = None
        self.agent: ManagedProcess | None = None
        self.exit_code: int | None = None

    @property
    def driver_root(self) -> Path:
        if self.options.driver_root is not None:
            return self.options.driver_root
        return Path("/") if self.options.backend == "nvml" else self.work / "driver-root"

    @property
    def registry_dir(self) -> Path:
        return self.work / "plugins_registry"

    @property
    def plugin_dir(self) -> Path:
        return self.work / "plugins" / self.options.driver_name

    @property
    def cdi_dir(self) -> Path:
        return self.work / "cdi"

    def settings(self, metrics_port: int) -> AgentSettings:
        return AgentSettings(
            node_name=self.options.node_name,
            driver_name=self.options.driver_name,
            backend=self.options.backend,
            simulated_profile=self.options.simulated_profile,
            kubeconfig=self.kubeconfig,
            metrics_host="127.0.0.1",
            metrics_port=metrics_port,
            log_format="json",
            plugin_dir=self.plugin_dir,
            registry_dir=self.registry_dir,
            cdi_dir=self.cdi_dir,
            state_dir=self.work / "state",
            driver_root=self.driver_root,
            # what keeps the machine's GPUs as they are (see the module's docstring)
            mig_policy="Static",
            passthrough_support=False,
            shared_gpu_replicas=0,
            compute_domains="disabled",
            health_checks=True,
        )

    async def start_cluster(self) -> str:
        """The API server, its CRDs and DeviceClasses, a namespace for the claim, and this machine's Node."""
        self.server = EmbeddedAPIServer()
        url = await self.server.start()
        self.server.write_kubeconfig(self.kubeconfig)
        self.client = client = KubeClient.for_url(
            url, token=self.server.tokens.issue(ADMIN), field_manager="gpudra-realgpu"
        )
        crds = [crd_for(model) for model in CRD_MODELS]
        for crd in crds:
            await client.apply_object(CRDS, crd)
        await wait_served(client, [c["metadata"]["name"] for c in crds])
        for device_class in load_device_classes(gpu_driver=self.options.driver_name):
            await client.apply_object(DEVICE_CLASSES, device_class)
        await client.apply_object(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
        await client.apply_object(NODES, node_body(self.options.node_name))
        return url

    async def start_agent(self, *, timeout: float = 120.0) -> int:
        """``python -m gpudra agent`` with every setting in its environment; ready once /readyz answers (its
        slices are published). Its pid."""
        port = free_port()
        settings = self.settings(port)
        self.agent = ManagedProcess(
            f"gpudra agent {self.options.node_name}",
            [sys.executable, "-m", "gpudra", "agent"],
            self.agent_log,
            f"http://127.0.0.1:{port}/readyz",
            env=process_environment(settings),
        )
        await self.agent.start(timeout=timeout)
        process = self.agent.process
        assert process is not None  # started
        return process.pid

    async def terminate_agent(self) -> int | None:
        """SIGTERM to the agent, as the kubelet stops its pod; its exit code, or None when it outlived the grace
        period (then it is killed)."""
        process = self.agent.process if self.agent is not None else None
        if process is None:
            return None
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        try:
            self.exit_code = await asyncio.wait_for(process.wait(), STOP_GRACE_SECONDS)
        except TimeoutError:
            await self._kill_agent()
            return None
        return self.exit_code

    def agent_group_alive(self) -> bool:
        """Whether any process of the agent's process group is left."""
        process = self.agent.process if self.agent is not None else None
        if process is None:
            return False
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return False
        return True

    async def _kill_agent(self) -> None:
        if self.agent is not None:
            await self.agent.stop(kill=True)

    async def close(self) -> None:
        await self._kill_agent()  # only when it still runs (a step failed before the stop)
        if self.client is not None:
            await self.client.close()
        if self.server is not None:
            await self.server.stop()
        shutil.rmtree(self.work, ignore_errors=True)
