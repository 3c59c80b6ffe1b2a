"""The real nodes of one cluster (``gpudra up --control-plane kubernetes --real-nodes N``) and what they share:
one 10.x /16 for their links and pods, the cluster's cgroup tree and the watchdog that ends it, and gpudra's Helm
release that runs the agent on them and the controller."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpudra.cluster.kubernetes.binaries import Binaries
from gpudra.cluster.kubernetes.controlplane import KubernetesControlPlane
from gpudra.cluster.processes import ProcessFailed
from gpudra.cluster.realnode.cgroups import CONTROL_PLANE, NodeCgroup, joining
from gpudra.cluster.realnode.install import chart_values, find_helm, helm_install, repo_chart, write_values
from gpudra.cluster.realnode.network import NodeNetwork, free_base
from gpudra.cluster.realnode.node import RealNode
from gpudra.cluster.realnode.runtime import NodeRuntime, find_runtime
from gpudra.cluster.realnode.sandbox import require_commands, run
from gpudra.cluster.realnode.watchdog import encode_directory
from gpudra.errors import NotFoundError
from gpudra.hardware.simulated.fake_nvml import FakeNvml
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import DEPLOYMENTS, PODS, RESOURCE_SLICES
from gpudra.telemetry import get_logger

log = get_logger(__name__)
CONTROLLER_DEPLOYMENT = "gpudra-controller"
NETWORK_LOCK = Path(tempfile.gettempdir()) / "gpudra-real-nodes.lock"
"""Held while a cluster picks its /16 and links its nodes, so that two clusters starting at once never pick the
same one."""


def cluster_id(directory: Path) -> str:
    """A short name of the cluster in ``directory`` (its cgroups are /gpudra/<id>): the same for every run there."""
    return hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:10]


@contextlib.contextmanager
def network_lock() -> Iterator[None]:
    with NETWORK_LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class RealNodes:
    """Start, install gpudra on, and end a cluster's real nodes."""

    def __init__(self, directory: Path, names: list[str]) -> None:
        """Everything a real node needs is looked for here, before anything starts: a missing piece is one
        sentence naming it and how to get it."""
        require_commands()
        self.runtime: NodeRuntime = find_runtime()
        self.helm = find_helm()
        self.chart = repo_chart()
        self.directory = directory
        self.names = names
        self.cluster = cluster_id(directory)
        self.control_plane_cgroup = NodeCgroup.on_this_machine(self.cluster, CONTROL_PLANE)
        self.nodes: dict[str, RealNode] = {}
        self._watchdog: asyncio.subprocess.Process | None = None

    def wrap_control_plane(self, argv: list[str]) -> list[str]:
        """A control-plane binary's command line, started in the cluster's ``control-plane`` cgroup."""
        return joining(self.control_plane_cgroup.system_procs, argv)

    async def begin(self) -> None:
        """Before the control plane starts: end what an earlier run here left, make the control plane's cgroup,
        and start the watchdog that ends the whole cluster if this process dies without ending it."""
        for member in [*self.names, CONTROL_PLANE]:
            cgroup = NodeCgroup.on_this_machine(self.cluster, member)
            left = cgroup.pids()
            if left:
                log.warning("ending what an earlier run left", member=member, processes=len(left))
                await asyncio.to_thread(cgroup.kill)
        self.control_plane_cgroup.create()
        self._watchdog = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gpudra.cluster.realnode.watchdog",
            self.cluster,
            *self.names,
            CONTROL_PLANE,
            stdin=asyncio.subprocess.PIPE,
            start_new_session=True,
        )

    async def start(
        self,
        objects: list[dict[str, Any]],
        roots: list[Path],
        client: KubeClient,
        binaries: Binaries,
        control_plane: KubernetesControlPlane,
        gpus: list[FakeNvml],
    ) -> None:
        """Start every node (``objects``, their Node objects; ``gpus``, each one's simulated GPUs), all at once
        once their namespaces are linked."""
        with network_lock():
            routes = await run(["ip", "-4", "route", "show", "table", "all"])
            addresses = await run(["ip", "-4", "addr", "show"])
            base = free_base(routes + "\n" + addresses)
            for index, (obj, root) in enumerate(zip(objects, roots, strict=True)):
                node = RealNode(
                    obj,
                    NodeNetwork(base, index),
                    root,
                    cluster=self.cluster,
                    runtime=self.runtime,
                    binaries=binaries,
                    control_plane=control_plane,
                )
                self.nodes[node.name] = node
                node.simulate_gpus(gpus[index])
                await node.start_namespaces()
        await asyncio.gather(*(node.start(client) for node in self.nodes.values()))

    async def install(
        self,
        admin_kubeconfig: Path,
        namespace: str,
        control_plane: KubernetesControlPlane,
        *,
        controller_env: dict[str, str],
        agent_env: dict[str, str],
    ) -> None:
        """``helm install`` of gpudra onto the real nodes (values in ``<dir>/helm-values.yaml``)."""
        assert control_plane.advertise_address is not None
        values = chart_values(
            self.runtime.images,
            api_host=control_plane.advertise_address,
            api_port=control_plane.port,
            controller_env=controller_env,
            agent_env=agent_env,
        )
        values_file = write_values(values, self.directory / "helm-values.yaml")
        await helm_install(self.helm, admin_kubeconfig, self.chart, namespace, values_file)

    async def wait_published(self, client: KubeClient, node: str, driver: str, *, timeout: float) -> None:
        """Until the agent's pod on ``node`` has published the node's GPUs."""
        deadline = time.monotonic() + timeout
        while True:
            slices, _ = await client.list_raw(RESOURCE_SLICES, field_selector=f"spec.nodeName={node}")
            if any(s["spec"].get("driver") == driver for s in slices):
                return
            if time.monotonic() > deadline:
                raise ProcessFailed(
                    f"gpudra's agent did not publish the GPUs of real node {node} within {timeout:.0f}s; "
                    f"its pods: {await self._pod_states(client, node)}"
                )
            await asyncio.sleep(0.5)

    async def wait_controller(self, client: KubeClient, namespace: str, *, timeout: float) -> None:
        """Until the controller Deployment has an available replica."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(NotFoundError):
                deployment = await client.get_raw(DEPLOYMENTS, CONTROLLER_DEPLOYMENT, namespace)
                if (deployment.get("status") or {}).get("availableReplicas"):
                    return
            if time.monotonic() > deadline:
                raise ProcessFailed(
                    f"gpudra's controller was not available within {timeout:.0f}s; "
                    f"its pods: {await self._pod_states(client, None, namespace)}"
                )
            await asyncio.sleep(0.5)

    @staticmethod
    async def _pod_states(client: KubeClient, node: str | None, namespace: str | None = None) -> str:
        selector = f"spec.nodeName={node}" if node else None
        pods, _ = await client.list_raw(PODS, namespace, field_selector=selector)
        states = []
        for pod in pods:
            status = pod.get("status") or {}
            waiting = [
                (s.get("state") or {}).get("waiting", {}).get("reason", "")
                for s in status.get("containerStatuses") or []
            ]
            states.append(
                f"{pod['metadata']['name']} {status.get('phase', '?')} {' '.join(w for w in waiting if w)}"
            )
        return "; ".join(states) or "none"

    async def stop(self) -> None:
        """End every node."""
        await asyncio.gather(*(node.stop() for node in self.nodes.values()), return_exceptions=True)

    async def remove_at_end(self, directory: Path) -> None:
        """Have the watchdog remove ``directory`` (a node's temporary one) once the nodes have ended, should this
        process die without removing it itself."""
        if self._watchdog is not None and self._watchdog.stdin is not None:
            self._watchdog.stdin.write(encode_directory(directory))
            await self._watchdog.stdin.drain()

    async def release(self) -> None:
        """Once the control plane has stopped too: let the watchdog go; it ends whatever is left and removes the
        cluster's cgroups."""
        if self._watchdog is not None and self._watchdog.stdin is not None:
            self._watchdog.stdin.close()
            await self._watchdog.wait()
