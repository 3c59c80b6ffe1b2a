"""``gpudra up``: the embedded cluster in one process.

It starts the project's in-process API server, applies the CRDs and DeviceClasses, registers one Node per simulated
node, runs one node agent per node (the same code as on a real GPU node, over a simulated NVML) and the controller,
then writes a kubeconfig and prints the fleet. ``--once`` brings everything up, prints, and shuts down cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import ssl
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

from rich.console import Console

from gpudra.agent.handover import ProcessLocks
from gpudra.agent.kubeletplugin.plugin import MAX_SOCKET_PATH_BYTES
from gpudra.agent.node_agent import NodeAgent
from gpudra.agent.runtime import AgentRuntime
from gpudra.api.crdgen import CRD_MODELS, crd_for
from gpudra.cluster.agentprocess import AgentProcess
from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.cluster.apiserver.identity import (
    ADMIN,
    SCHEDULER,
    Identity,
    TokenIssuer,
    node_identity,
    service_account,
)
from gpudra.cluster.apiserver.local import InProcessTransport
from gpudra.cluster.apiserver.process import APIServerProcess
from gpudra.cluster.apiserver.rbac import Policy
from gpudra.cluster.apiserver.servingtls import ServingTLS, new_serving_tls
from gpudra.cluster.apiserver.versions import KubeVersion, parse_minor
from gpudra.cluster.controlplane.manager import ControlPlane
from gpudra.cluster.dirlock import DirectoryLock
from gpudra.cluster.fleet import FleetNode, node_object
from gpudra.cluster.interpreter import (
    CLUSTER_GC_THRESHOLDS,
    GC_THRESHOLDS,
    SWITCH_INTERVAL,
    SharedSetting,
    ensure_open_files,
    rare_full_collections,
)
from gpudra.cluster.kubelet.kubeletserver import KubeletServer, PodLogBook, with_kubelet_endpoint
from gpudra.cluster.kubelet.standin import StandInKubelet, simulated_pod_ip
from gpudra.cluster.kubernetes.binaries import find_binaries
from gpudra.cluster.kubernetes.bootstrap import (
    AGENT_SERVICE_ACCOUNT,
    CONTROLLER_SERVICE_ACCOUNT,
    apply_base,
    repo_manifests,
)
from gpudra.cluster.kubernetes.controlplane import KubernetesControlPlane
from gpudra.cluster.kubernetes.realkubelet import RealKubelet, node_ip
from gpudra.cluster.rbacmanifests import manifest_rbac
from gpudra.cluster.realnode.fleet import RealNodes
from gpudra.cluster.realnode.install import settings_env
from gpudra.cluster.sim.controls import SimulatorControls
from gpudra.cluster.sim.inbox import FaultInbox
from gpudra.cluster.startup import (
    STAGE_API_SERVER,
    STAGE_CONTROLLER,
    STAGE_NODES,
    STAGE_SLICES,
    NoProgress,
    StartProgress,
    Summary,
    print_summary,
    start_progress,
)
from gpudra.cluster.tempdirs import RunDirectory
from gpudra.cluster.trynext import current_shell, try_next
from gpudra.computedomain import DaemonPodSettings
from gpudra.config import AgentSettings, ControllerSettings
from gpudra.controller.kopfapp import run_controller
from gpudra.devices import load_device_classes
from gpudra.errors import ConfigurationError, GpudraError
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.hardware.simulated import empty_mig
from gpudra.hardware.simulated.fake_nvml import FakeNvml
from gpudra.kube.client import KubeClient
from gpudra.kube.crdready import wait_served
from gpudra.kube.kubeconfig import read_credentials, write_kubeconfig
from gpudra.kube.resources import (
    CRDS,
    DEVICE_CLASSES,
    NAMESPACES,
    NODES,
    SERVICE_ACCOUNTS,
    device_taint_rules,
)
from gpudra.metrics import Metrics, metrics_app, serve_metrics
from gpudra.metricsserver import MetricsServer
from gpudra.reports import list_fleet
from gpudra.telemetry import get_logger

log = get_logger(__name__)


class ClusterNotReady(GpudraError):
    """The cluster's nodes, slices or controller did not come up in time: one sentence saying which, not a
    traceback."""


FLEET_POLL_PER_NODE = 0.025
READY_TIMEOUT = 120.0
OPEN_FILES_PER_NODE = 2
"""Files each simulated node's agent holds open in the cluster's process: its plugin's and its registration's
sockets (its hand-over locks are in memory: ``handover_locks``; interpreter.ensure_open_files)."""
OPEN_FILES_BESIDE_NODES = 256
"""Files the rest of the process may hold: the API server's, the controller's and the clients' connections, logs."""
READY_SECONDS_PER_NODE = 0.1


def fleet_ready_timeout(nodes: int) -> float:
    """How long ``gpudra up`` waits for a fleet of ``nodes`` to come up: two minutes, or a tenth of a second a
    node if that is longer, so that a large fleet on a slow machine is waited for rather than reported as not
    ready."""
    return max(READY_TIMEOUT, nodes * READY_SECONDS_PER_NODE)


LARGE_FLEET = 100
"""From this many simulated nodes on, the interpreter switches threads every ``LARGE_FLEET_SWITCH_INTERVAL``."""
LARGE_FLEET_SWITCH_INTERVAL = 0.0005
"""The thread switch interval while a large fleet runs (CPython's default is 5 ms). One event loop serves every
simulated node while threads compute beside it (simulated NVML reads, the controller's loop): each time the loop
blocks in a system call (a socket write, a file read) a computing thread takes the GIL, and the loop waits up to the
interval to get it back. At 1,000 nodes those waits were a quarter of the loop's time; at 0.5 ms the fleet came up
22 % sooner (48.5 and 50.3 s against 61.1 and 65.8 s, 2026-11-27). A 64-tray ComputeDomain run, where two event
loops trade the GIL, was no faster (10.1 and 11.2 s at 0.5 ms, 9.3 s at 5 ms), so small fleets keep the default."""


PER_NODE_AGENT_SETTINGS = frozenset(
    {
        "node_name", "backend", "simulated_profile", "simulated_fleet_index", "simulated_state", "kubeconfig",
        "plugin_dir", "registry_dir", "cdi_dir", "state_dir", "compute_domain_plugin_dir", "node_ip",
        "instance_id", "log_format", "metrics_port", "driver_root",
    }
)  # fmt: skip
"""What an agent's DaemonSet pod sets for itself (its node, its pod, the chart's paths and backend)."""


def pod_uid() -> str:
    """A new simulated pod UID (an agent process's instance id, as its DaemonSet pod's UID would be)."""
    return str(uuid.uuid4())


def _counted(wait: Coroutine[Any, Any, Any], progress: StartProgress, stage: str) -> asyncio.Task[Any]:
    """A task of ``wait`` that advances ``stage`` when it completes."""
    task = asyncio.ensure_future(wait)
    task.add_done_callback(lambda t: None if t.cancelled() or t.exception() else progress.advance(stage))
    return task


@dataclass
class UpOptions:
    nodes: list[FleetNode]
    port: int = 0
    kubeconfig: Path = Path("gpudra-demo/kubeconfig")
    once: bool = False
    metrics_port: int | None = None  # None: no metrics server; 0: a free port
    hardware_poll_seconds: float = 0.25
    compute_domain_daemon_mode: Literal["daemonset", "host-managed"] = "daemonset"
    controller: ControllerSettings = field(default_factory=ControllerSettings)
    ready_timeout: float = READY_TIMEOUT
    dynamic_mig: bool = False  # MIG-capable GPUs start MIG-enabled and empty, agents run mig_policy=Dynamic
    agent_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Node profile -> AgentSettings fields for the agents of that profile (e.g. shared_gpu_replicas)."""
    agent_settings: dict[str, Any] = field(default_factory=dict)
    """AgentSettings fields for every agent (e.g. health_recovery_seconds)."""
    api_server_process: bool = False
    """Run the API server in a process of its own (``server`` stays None, ``server_process`` is set), reached
    over HTTP. In the cluster's own process the nodes and stand-ins call it without HTTP, which is faster even at
    1,000 nodes (48.7 and 52.7 s against 55.7 and 65.5 s apart, alternately, 2026-11-27)."""
    seed: Callable[[KubeClient], Awaitable[None]] | None = None
    """Objects to create once everything runs (``--from-cluster``: the copied classes, claims and pods)."""
    agent_processes: bool = False
    """Each simulated node's agent in a process of its own (``agent_processes``), killable and restartable."""
    control_plane: Literal["embedded", "kubernetes"] = "embedded"
    """embedded: the project's API server and stand-ins; kubernetes: the real control plane (``make kubernetes``)."""
    kubernetes_version: str | None = None
    """The Kubernetes version: with ``control_plane="kubernetes"`` which built version runs (default: K8S_VERSION,
    else 1.37.2); embedded, which minor the API server emulates (1.34 to 1.37, default 1.37; the patch is ignored)."""
    feature_gates_on: tuple[str, ...] = ()
    """Alpha gates turned on (``DRAListTypeAttributes``), in the embedded API server or on every component of the
    real control plane; off by default, as in kube-apiserver."""
    feature_gates_off: tuple[str, ...] = ()
    """With ``control_plane="kubernetes"``: gates turned off on every component, e.g. to run as an older version
    would (DRAResourceClaimGranularStatusAuthorization off: claim status is authorized as on 1.34 and 1.35)."""
    control_plane_qps: float | None = None
    """With ``control_plane="kubernetes"``: kube-scheduler's and kube-controller-manager's client rate limit toward
    the API server (None: their defaults, 50 and 20 QPS), as a cluster operator raises it for large fleets."""

    web_port: int | None = None
    """Serve the controller's web view on 127.0.0.1 at this port (0: a free port; None: no web view)."""

    real_kubelets: int = 0
    """With ``control_plane="kubernetes"``: the first N nodes run under a real kubelet over a fake container
    runtime instead of the stand-in kubelet (``real_kubelets``)."""

    real_nodes: int = 0
    """With ``control_plane="kubernetes"``: the first N nodes are real nodes (a real kubelet over containerd and
    runc, in namespaces of their own), with gpudra installed on them by its Helm chart from its image
    (``real_nodes``; docs/real-node.md)."""


@dataclass(frozen=True)
class ControllerConnection:
    """How the controller reaches the API server: a kubeconfig of its ServiceAccount (None: the chart's
    Deployment on a real node, with its own)."""

    kubeconfig: Path | None = None
    daemon_image: str | None = None
    """The IMEX daemon image the applied admission policy allows the controller (the base's); None: its own."""


@dataclass
class EmbeddedCluster:
    """Everything ``gpudra up`` runs; tests use it directly."""

    options: UpOptions
    metrics: Metrics = field(default_factory=Metrics)
    server: EmbeddedAPIServer | None = None
    server_process: APIServerProcess | None = None
    client: KubeClient | None = None
    agents: dict[str, NodeAgent] = field(default_factory=dict)
    simulated: dict[str, FakeNvml] = field(default_factory=dict)
    runtimes: dict[str, AgentRuntime] = field(default_factory=dict)
    handover_locks: ProcessLocks = field(default_factory=ProcessLocks)
    """The hand-over locks of the agents running in this process (their state directories are this process's
    alone): in memory, where a flock would hold two open files a node."""
    kubelets: dict[str, StandInKubelet] = field(default_factory=dict)
    pod_logs: PodLogBook = field(default_factory=PodLogBook)
    kubelet_server: KubeletServer | None = None
    real_kubelets: dict[str, RealKubelet] = field(default_factory=dict)
    real_nodes: RealNodes | None = None
    node_dirs: dict[str, Path] = field(default_factory=dict)
    _run_dir: RunDirectory = field(default_factory=RunDirectory)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    control_plane: ControlPlane | None = None
    kubernetes: KubernetesControlPlane | None = None
    agent_clients: dict[str, KubeClient] = field(default_factory=dict)
    """Each node's agent's client (Kubernetes: its node-bound ServiceAccount identity)."""
    agent_processes: dict[str, AgentProcess] = field(default_factory=dict)
    fault_inboxes: dict[str, FaultInbox] = field(default_factory=dict)
    """Each agent process's fault inbox (gpudra sim fault reaches its simulated GPUs through it)."""
    _clients: list[KubeClient] = field(default_factory=list)
    sim_controls: SimulatorControls | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _controller: threading.Thread | None = None
    _controller_error: BaseException | None = None
    _metrics_runner: MetricsServer | None = None
    _tuned: list[SharedSetting[Any]] = field(default_factory=list)  # interpreter settings held until stop()
    metrics_url: str = ""
    web_url: str = ""
    _profile_settings: dict[str, AgentSettings] = field(default_factory=dict)
    tokens: TokenIssuer = field(default_factory=TokenIssuer)
    """Signs the embedded API server's bearer tokens: each component's identity (docs/security.md)."""
    _identity_clients: dict[Identity, KubeClient] = field(default_factory=dict)
    serving_tls: ServingTLS | None = None
    """The embedded API server's CA and certificate (kubectl sends credentials only over HTTPS)."""

    @property
    def large_fleet(self) -> bool:
        return len(self.options.nodes) >= LARGE_FLEET

    @property
    def hardware_poll_seconds(self) -> float:
        """How often each simulated node's agent reads its GPUs: ``hardware_poll_seconds``, or slower in a large
        fleet, where every node reading its GPUs four times a second would take the process's whole CPU: a read
        of a simulated dgx-h100 costs 1.7 to 2.9 ms of CPU (2026-11-27), so 25 ms per node keeps the fleet's reads
        to about a tenth of a core (1,000 nodes read every 25 s; at 5 s they took half of it and doubled the
        start of such a fleet). Health events (XIDs, a GPU falling off the bus) and the agent's own MIG changes
        wake a node at once, whatever the period. The agents look for a newer instance asking for their node (a
        rolling update) as often."""
        return max(self.options.hardware_poll_seconds, len(self.options.nodes) * FLEET_POLL_PER_NODE)

    @property
    def cluster_kubeconfig(self) -> Path:
        """The kubeconfig the cluster's own processes use from the start (agent processes, the API server process);
        the user's (``options.kubeconfig``) is written once the cluster is usable."""
        if self.kubernetes is not None:
            return self.kubernetes.admin_kubeconfig
        return self.options.kubeconfig.parent / "embedded" / "kubeconfig"

    @property
    def controller_kubeconfig(self) -> Path:
        """The kubeconfig of the controller's ServiceAccount (the in-process controller's and its web view's)."""
        if self.kubernetes is not None:
            return self.kubernetes.layout.kubeconfig("gpudra-controller")
        return self.cluster_kubeconfig.parent / "gpudra-controller.kubeconfig"

    @property
    def url(self) -> str:
        if self.kubernetes is not None:
            return self.kubernetes.url
        if self.server_process is not None:
            return self.server_process.url
        assert self.server is not None
        return self.server.url

    async def _start_server(self) -> str:
        """The embedded API server, enforcing manifests/base's RBAC in the driver's namespace; the admin's
        kubeconfig written."""
        self.cluster_kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        rbac = manifest_rbac(self.options.controller.namespace)
        self.serving_tls = new_serving_tls(self.cluster_kubeconfig.parent / "pki")
        if self.options.api_server_process:
            self.server_process = APIServerProcess(
                port=self.options.port,
                kubeconfig=self.cluster_kubeconfig,
                feature_gates=frozenset(self.options.feature_gates_on),
                minor=parse_minor(self.options.kubernetes_version),
                tokens=self.tokens,
                rbac=rbac,
                tls=self.serving_tls,
            )
            return await self.server_process.start()
        self.server = EmbeddedAPIServer(
            port=self.options.port,
            feature_gates=frozenset(self.options.feature_gates_on),
            minor=parse_minor(self.options.kubernetes_version),
            tokens=self.tokens,
            policy=Policy(rbac),
            tls=self.serving_tls,
        )
        url = await self.server.start()
        self.server.write_kubeconfig(self.cluster_kubeconfig)
        return url

    def _embedded_client(self, who: Identity) -> KubeClient:
        """The client of the embedded server as ``who`` (one per identity): in-process when the server shares
        this event loop (the stand-ins and simulated nodes), else over HTTPS with a token of ``who``; each node
        keeps watches open, so no cap on connections."""
        client = self._identity_clients.get(who)
        if client is None:
            if self.server is not None:
                client = KubeClient(InProcessTransport(self.server, who), field_manager="gpudra-up")
            else:
                assert self.serving_tls is not None
                client = KubeClient.for_url(
                    self.url,
                    token=self.tokens.issue(who),
                    ca=self.serving_tls.ca,
                    field_manager="gpudra-up",
                    max_connections=None,
                )
            self._identity_clients[who] = client
        return client

    def _embedded_kubeconfig(self, who: Identity, path: Path) -> Path:
        """A kubeconfig of the embedded server with a token of ``who``, readable by its owner only."""
        return write_kubeconfig(
            path, replace(read_credentials(self.cluster_kubeconfig), token=self.tokens.issue(who))
        )

    async def _start_embedded(self) -> ControllerConnection:
        await self._start_server()
        self.client = self._embedded_client(ADMIN)
        for crd in (crd_for(model) for model in CRD_MODELS):
            await self.client.apply_object(CRDS, crd)
        for device_class in load_device_classes():
            await self.client.apply_object(DEVICE_CLASSES, device_class)
        namespace = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": self.options.controller.namespace},
        }
        await self.client.apply_object(NAMESPACES, namespace)
        # the ServiceAccounts of manifests/base: the controller's and the agents' identities, and the ComputeDomain
        # daemon pods' (the API server's ServiceAccount admission refuses pods whose account does not exist)
        imex = DaemonPodSettings().service_account or "default"
        for account in (imex, CONTROLLER_SERVICE_ACCOUNT, AGENT_SERVICE_ACCOUNT):
            meta = {"name": account, "namespace": self.options.controller.namespace}
            await self.client.apply_object(
                SERVICE_ACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}
            )
        controller = service_account(self.options.controller.namespace, CONTROLLER_SERVICE_ACCOUNT)
        return ControllerConnection(
            kubeconfig=self._embedded_kubeconfig(controller, self.controller_kubeconfig)
        )

    async def _start_kubernetes(self) -> ControllerConnection:
        """The real control plane: gpudra installed from manifests/base as a user installs it, the controller
        with its ServiceAccount's token."""
        real = self.options.real_kubelets > 0 or self.options.real_nodes > 0
        binaries = find_binaries(self.options.kubernetes_version, need_kubelet=real)
        directory = self.options.kubeconfig.parent.absolute()
        wrap: dict[str, Any] = {}
        if self.options.real_nodes:
            # a missing piece fails here, before anything starts
            self.real_nodes = RealNodes(
                directory, [n.name for n in self.options.nodes[: self.options.real_nodes]]
            )
            await self.real_nodes.begin()
            wrap["wrap"] = self.real_nodes.wrap_control_plane
        self.kubernetes = KubernetesControlPlane(
            directory / "kubernetes",
            binaries,
            port=self.options.port,
            gates_on=self.options.feature_gates_on,
            gates_off=self.options.feature_gates_off,
            advertise_address=node_ip() if self.real_nodes is not None else None,
            client_qps=self.options.control_plane_qps,
            **wrap,
        )
        await self.kubernetes.start()
        admin = self.kubernetes.admin_kubeconfig
        self.client = await KubeClient.from_environment(admin, field_manager="gpudra-up")
        if self.real_nodes is not None:
            await self.real_nodes.install(
                admin,
                self.options.controller.namespace,
                self.kubernetes,
                controller_env=self._controller_env(),
                agent_env=self._real_agent_env(),
            )
            return ControllerConnection()
        applied = await apply_base(admin, repo_manifests())
        # the in-process controller starts next: on CRDs not served yet it logged 429s and kopf's retries
        await wait_served(
            self.client,
            [o["metadata"]["name"] for o in applied.objects if o["kind"] == "CustomResourceDefinition"],
        )
        kubeconfig = await self.kubernetes.service_account_kubeconfig(
            self.client,
            self.options.controller.namespace,
            CONTROLLER_SERVICE_ACCOUNT,
            who="gpudra-controller",
        )
        return ControllerConnection(kubeconfig=kubeconfig, daemon_image=applied.daemon_image)

    async def start(self, progress: StartProgress | None = None) -> None:
        self._check_options()
        # Every start has a new API server, which knows none of the claims an earlier run's nodes prepared: their
        # checkpoints, CDI specs and simulated GPUs would hold devices for claims that no longer exist.
        shutil.rmtree(self.options.kubeconfig.parent / "nodes", ignore_errors=True)
        GC_THRESHOLDS.hold(CLUSTER_GC_THRESHOLDS)
        self._tuned.append(GC_THRESHOLDS)
        if not self.large_fleet:
            await self._start(progress or NoProgress())
            return
        SWITCH_INTERVAL.hold(LARGE_FLEET_SWITCH_INTERVAL)
        self._tuned.append(SWITCH_INTERVAL)
        with rare_full_collections():
            await self._start(progress or NoProgress())

    def _check_options(self) -> None:
        if self.options.real_kubelets and self.options.control_plane != "kubernetes":
            raise ConfigurationError("--real-kubelet needs --control-plane kubernetes")
        if self.options.real_nodes:
            if self.options.control_plane != "kubernetes":
                raise ConfigurationError("--real-nodes needs --control-plane kubernetes")
            if self.options.real_kubelets:
                raise ConfigurationError("--real-nodes and --real-kubelet: choose one")
            if self.options.real_nodes > len(self.options.nodes):
                raise ConfigurationError(
                    f"--real-nodes {self.options.real_nodes} asks for more real nodes than the fleet has "
                    f"({len(self.options.nodes)})"
                )
        if not self.options.agent_processes:
            count = len(self.options.nodes)
            ensure_open_files(
                count * OPEN_FILES_PER_NODE + OPEN_FILES_BESIDE_NODES, f"a fleet of {count:,} simulated nodes"
            )

    async def _start(self, progress: StartProgress) -> None:
        progress.begin(STAGE_API_SERVER, 1)
        if self.options.control_plane == "kubernetes":
            connection = await self._start_kubernetes()
        else:
            connection = await self._start_embedded()
        assert self.client is not None
        progress.advance(STAGE_API_SERVER, detail=self.url)

        if self.options.metrics_port is not None:
            runner = await serve_metrics(
                metrics_app(self.metrics.registry, lambda: True),
                "127.0.0.1",
                self.options.metrics_port,
                setting="--metrics-port",
            )
            self._metrics_runner = runner
            port = runner.addresses[0][1]
            self.metrics_url = f"http://127.0.0.1:{port}/metrics"

        progress.begin(STAGE_NODES, len(self.options.nodes))
        progress.begin(STAGE_SLICES, len(self.options.nodes))
        waiters: list[asyncio.Task[Any]] = []
        self.kubelet_server = self._kubelet_server()
        await self.kubelet_server.start()
        real = self.options.nodes[: self.options.real_nodes]
        if real:
            for published in await self._start_real_nodes(real):
                progress.advance(STAGE_NODES)
                waiters.append(_counted(published, progress, STAGE_SLICES))
        for node in self.options.nodes[len(real) :]:
            published = await self.add_node(node)
            progress.advance(STAGE_NODES)
            waiters.append(_counted(published, progress, STAGE_SLICES))
        self.sim_controls = SimulatorControls(
            self.client, self.simulated, self.options.kubeconfig.parent, self.fault_inboxes
        )
        await self.sim_controls.start()
        self._spawn(self.sim_controls.run(), "simulator faults")
        progress.begin(STAGE_CONTROLLER, 1 if self.kubernetes is not None else 2)
        if self.kubernetes is None:
            emulated = KubeVersion(parse_minor(self.options.kubernetes_version))
            self.control_plane = ControlPlane(
                self._embedded_client(SCHEDULER),
                device_taint_rules(emulated.taint_rule_version),
                evict_extended=emulated.evicts_extended_resource_claims,
                kube_minor=emulated.minor,
            )
            self._spawn(self.control_plane.run(), "control plane")
        if self.real_nodes is not None:
            # the controller is the chart's Deployment, on a real node
            waiters.append(
                _counted(
                    self.real_nodes.wait_controller(
                        self.client, self.options.controller.namespace, timeout=self.options.ready_timeout
                    ),
                    progress,
                    STAGE_CONTROLLER,
                )
            )
            await self._wait_ready(waiters, None)
            return
        controller_ready = threading.Event()
        self._controller = threading.Thread(
            target=self._run_controller,
            args=(
                controller_ready,
                run_controller(
                    self.options.controller.model_copy(
                        update={
                            "imex_daemon_mode": self.options.compute_domain_daemon_mode,
                            "imex_daemon_image": connection.daemon_image
                            or self.options.controller.imex_daemon_image,
                            "kubeconfig": connection.kubeconfig,
                            "web_port": self.options.web_port,
                            "web_host": "127.0.0.1",
                        }
                    ),
                    self.metrics,
                    stop=self._stop,
                    ready=controller_ready,
                    web_view_started=self._web_view_started,
                ),
            ),
            name="gpudra-controller",
            daemon=True,
        )
        self._controller.start()
        if self.control_plane is not None:
            waiters.append(_counted(self.control_plane.synced.wait(), progress, STAGE_CONTROLLER))
        waiters.append(
            _counted(
                asyncio.to_thread(self._controller_started, controller_ready, self.options.ready_timeout),
                progress,
                STAGE_CONTROLLER,
            )
        )
        await self._wait_ready(waiters, controller_ready)

    def _run_controller(self, ready: threading.Event, main: Coroutine[Any, Any, None]) -> None:
        """The controller's thread. A failure before it is ready (its web view's port taken) is handed to the
        start, which raises it at once rather than waiting out its timeout; a later one ends the thread as
        before, its traceback printed."""
        try:
            asyncio.run(main)
        except BaseException as exc:
            if ready.is_set():
                raise
            self._controller_error = exc
        finally:
            ready.set()

    def _controller_started(self, ready: threading.Event, timeout: float) -> None:
        """Until the controller is ready (or ``timeout``); its failure to start raised here."""
        ready.wait(timeout)
        if self._controller_error is not None:
            raise self._controller_error

    async def _wait_ready(
        self, waiters: list[asyncio.Task[Any]], controller_ready: threading.Event | None
    ) -> None:
        """Until every waiter is done (the first failure is raised), then the seed objects; then the user's
        kubeconfig: a script that waits for it finds the nodes registered, their slices published and the
        controller ready."""
        assert self.client is not None
        done, pending = await asyncio.wait(
            waiters, timeout=self.options.ready_timeout, return_when=asyncio.FIRST_EXCEPTION
        )
        for task in pending:
            task.cancel()
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        if pending or (controller_ready is not None and not controller_ready.is_set()):
            waiting = (
                f"{len(pending)} of {len(waiters)} node steps (serving, slices published) not done"
                if pending
                else ""
            )
            if controller_ready is not None and not controller_ready.is_set():
                waiting = ", ".join(w for w in (waiting, "the controller not ready") if w)
            raise ClusterNotReady(
                f"the cluster was not ready after {self.options.ready_timeout:.0f}s ({waiting}); "
                f"{self.options.kubeconfig.parent / 'gpudra.log'} says why"
                + (
                    " (and, on real nodes, `kubectl -n gpudra logs ds/gpudra-agent`)"
                    if self.real_nodes
                    else ""
                )
            )
        if self.options.seed is not None:
            await self.options.seed(self.client)
        write_kubeconfig(self.options.kubeconfig, read_credentials(self.cluster_kubeconfig))

    async def _start_real_nodes(self, nodes: list[FleetNode]) -> list[Coroutine[Any, Any, Any]]:
        """Start the real nodes, their simulated GPUs ready; what to await for each one's slices (published by
        gpudra's agent pod there)."""
        assert self.real_nodes is not None and self.kubernetes is not None and self.client is not None
        roots, gpus = [], []
        for node in nodes:
            root = self._node_root(node.name)
            self.node_dirs[node.name] = root
            roots.append(root)
            fake = FakeNvml.from_machine(node.hardware())
            if self.options.dynamic_mig:
                empty_mig(NvmlBackend(node.name, nvml=fake))
            gpus.append(fake)
        if self._run_dir.made is not None:
            await self.real_nodes.remove_at_end(self._run_dir.made)
        await self.real_nodes.start(
            [node_object(n) for n in nodes],
            roots,
            self.client,
            self.kubernetes.binaries,
            self.kubernetes,
            gpus,
        )
        for node in nodes:  # the chart's agent serves <simulated.stateDir>/faults
            self.fault_inboxes[node.name] = FaultInbox(
                self.real_nodes.nodes[node.name].state_file.parent / "faults"
            )
        driver = self._agent_settings(nodes[0].profile).driver_name
        return [
            self.real_nodes.wait_published(self.client, n.name, driver, timeout=self.options.ready_timeout)
            for n in nodes
        ]

    def _controller_env(self) -> dict[str, str]:
        """The controller's settings as the chart's ``controller.env`` (those the chart does not set itself)."""
        settings = self.options.controller.model_copy(
            update={"imex_daemon_mode": self.options.compute_domain_daemon_mode}
        )
        return settings_env(
            settings, exclude={"kubeconfig", "namespace", "web_port", "web_host", "log_format"}
        )

    def _real_agent_env(self) -> dict[str, str]:
        """The agents' settings as the chart's ``agent.env``: what this cluster sets for every agent (the
        per-node ones come from the DaemonSet pod and the simulated GPUs' state file)."""
        settings = self._agent_settings(self.options.nodes[0].profile)
        return settings_env(settings, exclude=PER_NODE_AGENT_SETTINGS)

    def _web_view_started(self, url: str) -> None:
        self.web_url = url  # called from the controller's thread, before it reports ready

    async def add_node(self, node: FleetNode) -> Coroutine[Any, Any, Any]:
        """Register a Node, simulate its GPUs, start its agent (slices + kubelet plugin, in this process or as a
        process of its own) and its stand-in kubelet. Each node gets its own plugin, registry, CDI and state
        directories. Returns what to await for the node's slices to be published."""
        assert self.client is not None
        real = self.kubernetes is not None and len(self.real_kubelets) < self.options.real_kubelets
        root = self._node_root(node.name, real_kubelet=real)
        self.node_dirs[node.name] = root
        if real:
            assert self.kubernetes is not None
            self.real_kubelets[node.name] = RealKubelet(
                node_object(node), root, self.kubernetes.binaries, self.kubernetes
            )
        agent_kubeconfig, agent_client, kubelet_client = await self._node_clients(node)
        self.agent_clients[node.name] = agent_client
        fake = FakeNvml.from_machine(node.hardware())
        settings = self._agent_settings(node.profile).model_copy(
            update={
                "node_name": node.name,
                "simulated_fleet_index": node.fleet_index,
                "plugin_dir": root / "plugins",
                "registry_dir": root / "registry",
                "cdi_dir": root / "cdi",
                "state_dir": root / "state",
                "compute_domain_plugin_dir": root / "cd-plugin",
                "node_ip": simulated_pod_ip(node.name),
            }
        )
        if real:
            settings = settings.model_copy(update=self.real_kubelets[node.name].plugin_settings(settings))
        backend = NvmlBackend(node.name, nvml=fake)
        if self.options.dynamic_mig:
            empty_mig(backend)
        if self.options.agent_processes:
            state = root / "simulated-gpus.state"
            fake.persist_to(state)
            instance = pod_uid()
            process = AgentProcess(
                settings.model_copy(
                    update={"simulated_state": state, "kubeconfig": agent_kubeconfig, "instance_id": instance}
                ),
                root / "agent.log",
                faults=root / "faults" / instance,
            )
            self.agent_processes[node.name] = process
            self.fault_inboxes[node.name] = FaultInbox(root / "faults" / instance)
            await process.start()  # ready: its /readyz answers once its slices are published
            published: Coroutine[Any, Any, Any] = asyncio.sleep(0)
        else:
            runtime = AgentRuntime(settings, backend, agent_client, self.metrics, locks=self.handover_locks)
            self.simulated[node.name] = fake
            self.agents[node.name] = runtime.agent
            self.runtimes[node.name] = runtime
            self._spawn(runtime.run(), f"agent {node.name}")
            published = runtime.agent.published.wait()
        if real:
            return self._plugin_registered(published, self.real_kubelets[node.name], settings.driver_name)
        kubelet = StandInKubelet(
            kubelet_client,
            node.name,
            settings.registry_dir,
            cdi_dir=settings.cdi_dir,
            pod_client=self._pod_client if self.kubernetes is not None else self._embedded_pod_client,
            logs=self.pod_logs,
            inventory=(
                (lambda: NvmlBackend(node.name, nvml=self.simulated_gpus(node.name)).read_inventory())
                if self.options.agent_processes
                else backend.read_inventory
            ),
        )
        self.kubelets[node.name] = kubelet
        self._spawn(kubelet.run(), f"kubelet {node.name}")
        return published

    @staticmethod
    async def _plugin_registered(published: Awaitable[Any], kubelet: RealKubelet, driver: str) -> None:
        """A real kubelet's node is ready once its slices are published and its kubelet has the plugin."""
        await published
        await kubelet.wait_for_plugin(driver)

    async def roll_agent(self, node: str) -> AgentProcess:
        """A rolling update of one node's agent process, as its DaemonSet does it with ``maxSurge: 1,
        maxUnavailable: 0``: a new instance (a new pod UID) starts beside the old one and takes the node over; once
        it is ready the old one gets SIGTERM. Returns the new process."""
        old = self.agent_processes[node]
        instance = pod_uid()
        faults = self.node_dirs[node] / "faults" / instance
        new = AgentProcess(
            old.settings.model_copy(update={"instance_id": instance}),
            self.node_dirs[node] / f"agent-{old.starts + 1}.log",
            faults=faults,
        )
        await new.start()
        self.fault_inboxes[node] = FaultInbox(faults)
        await old.stop()
        self.agent_processes[node] = new
        return new

    def _agent_settings(self, profile: str) -> AgentSettings:
        """The settings the agents of a node profile share, validated once per profile (reading them from the
        environment costs milliseconds; each node's agent gets a copy with its own names and directories)."""
        settings = self._profile_settings.get(profile)
        if settings is None:
            settings = self._profile_settings[profile] = AgentSettings(
                node_name=f"{profile}-template",
                backend="simulated",
                simulated_profile=profile,
                hardware_poll_seconds=self.hardware_poll_seconds,
                mig_retry_seconds=max(self.options.hardware_poll_seconds * 2, 0.2),
                handover_poll_seconds=max(0.2, self.hardware_poll_seconds),
                compute_domain_daemon_mode=self.options.compute_domain_daemon_mode,
                **{
                    "mig_policy": "Dynamic" if self.options.dynamic_mig else "Static",
                    **self.options.agent_settings,
                    **self.options.agent_overrides.get(profile, {}),
                },
            )
        return settings

    def simulated_gpus(self, node: str) -> FakeNvml:
        """The node's simulated GPUs as they are now: the live fake, or (agent processes, real nodes) the state the
        agent's process keeps, read afresh."""
        if self.real_nodes is not None and node in self.real_nodes.nodes:
            return FakeNvml.load(self.real_nodes.nodes[node].state_file, keep_persisting=False)
        if self.options.agent_processes:
            return FakeNvml.load(self.node_dirs[node] / "simulated-gpus.state", keep_persisting=False)
        return self.simulated[node]

    def _kubelet_server(self) -> KubeletServer:
        """The stand-in kubelets' node endpoint (pod logs): on 127.0.0.1 for the embedded API server; for the real
        one on this machine's address with a serving certificate of the cluster CA, which kube-apiserver checks."""
        if self.kubernetes is None:
            return KubeletServer(self.pod_logs)
        address = "127.0.0.1"
        serving = self.kubernetes.kubelet_serving_certificate("stand-ins", address)
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(serving.cert, serving.key)
        return KubeletServer(self.pod_logs, address, tls)

    async def _node_clients(self, node: FleetNode) -> tuple[Path, KubeClient, KubeClient]:
        """(agent's kubeconfig, agent's client, kubelet's client). Embedded: the agent is the agent
        ServiceAccount (its kubeconfig, for an agent process, in the node's directory), the kubelet
        system:node:<name>. Kubernetes: the kubelet registers its Node with the node's own certificate
        (system:node:<name>, so the Node authorizer and NodeRestriction apply), and the agent gets the agent
        ServiceAccount's token bound to that Node, as its DaemonSet pod's."""
        assert self.client is not None
        if self.kubernetes is None:
            assert self.kubelet_server is not None
            registered = node_object(node)
            with_kubelet_endpoint(registered, simulated_pod_ip(node.name), self.kubelet_server.port)
            kubelet = self._embedded_client(node_identity(node.name))
            await kubelet.apply_object(NODES, registered)
            agent = service_account(self.options.controller.namespace, AGENT_SERVICE_ACCOUNT)
            kubeconfig = self.node_dirs[node.name] / "agent.kubeconfig"
            if self.options.agent_processes:
                self._embedded_kubeconfig(agent, kubeconfig)
            return kubeconfig, self._embedded_client(agent), kubelet
        kubelet = await self._own_client(self.kubernetes.node_kubeconfig(node.name), f"kubelet-{node.name}")
        real = self.real_kubelets.get(node.name)
        if real is None:
            assert self.kubelet_server is not None
            endpoint = self.kubelet_server.host, self.kubelet_server.port
            registered = await kubelet.create(NODES, with_kubelet_endpoint(node_object(node), *endpoint))
        else:
            registered = await real.start_and_register(kubelet)
        kubeconfig = await self.kubernetes.service_account_kubeconfig(
            self.client,
            self.options.controller.namespace,
            AGENT_SERVICE_ACCOUNT,
            who=f"gpudra-agent-{node.name}",
            bound_node=(node.name, registered["metadata"]["uid"]),
        )
        return kubeconfig, await self._own_client(kubeconfig, f"gpudra-agent-{node.name}"), kubelet

    async def _own_client(self, kubeconfig: Path, field_manager: str) -> KubeClient:
        client = await KubeClient.from_environment(kubeconfig, field_manager=field_manager)
        self._clients.append(client)
        return client

    async def _pod_client(self, kubelet: KubeClient, pod: dict[str, Any]) -> KubeClient:
        """A container's in-cluster identity: its ServiceAccount's token, bound to the pod, requested by the
        node's kubelet as the real kubelet does for a projected token volume."""
        assert self.kubernetes is not None
        meta = pod["metadata"]
        kubeconfig = await self.kubernetes.service_account_kubeconfig(
            kubelet,
            meta["namespace"],
            (pod.get("spec") or {}).get("serviceAccountName") or "default",
            who=f"pod-{meta['namespace']}-{meta['name']}",
            bound_pod=(meta["name"], meta["uid"]),
        )
        return await self._own_client(kubeconfig, meta["name"])

    async def _embedded_pod_client(self, kubelet: KubeClient, pod: dict[str, Any]) -> KubeClient:
        """A container's in-cluster identity on the embedded server: its ServiceAccount."""
        account = (pod.get("spec") or {}).get("serviceAccountName") or "default"
        return self._embedded_client(service_account(pod["metadata"]["namespace"], account))

    def _node_root(self, name: str, *, real_kubelet: bool = False) -> Path:
        """``<kubeconfig dir>/nodes/<node>``, or ``<the run's temporary directory>/<node>`` when the socket paths
        under the first would pass the 107-byte unix socket limit (tempdirs.py: a run that dies leaves it to the
        next one to remove)."""
        root = (self.options.kubeconfig.parent / "nodes" / name).absolute()
        registry = root / "kubelet" / "plugins_registry" if real_kubelet else root / "registry"
        longest = max(
            registry / f"{AgentSettings.model_fields['compute_domain_driver_name'].default}-reg.sock",
            root / "plugins" / f"dra-{pod_uid()}.sock",  # an agent process's (its instance id is a pod UID)
            key=lambda path: len(str(path)),
        )
        if len(os.fsencode(str(longest))) > MAX_SOCKET_PATH_BYTES:
            root = self._run_dir.path() / name
        root.mkdir(parents=True, exist_ok=True)
        return root

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        task.add_done_callback(self._task_done)
        self._tasks.append(task)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("embedded cluster task failed", task=task.get_name(), error=repr(task.exception()))

    async def stop(self) -> None:
        """Agents are cancelled; the controller (in its own thread) stops on its flag."""
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=10)
        if self._controller is not None:
            await asyncio.to_thread(self._controller.join, 10)
        if self.kubelet_server is not None:
            await self.kubelet_server.stop()
        if self.sim_controls is not None:
            await self.sim_controls.stop()
        if self._metrics_runner is not None:
            await self._metrics_runner.cleanup()
        for client in (*self._clients, *self._identity_clients.values()):
            if client is not self.client:
                await client.close()
        if self.client is not None:
            await self.client.close()
        for process in self.agent_processes.values():
            await process.stop()
        for kubelet in self.real_kubelets.values():
            await kubelet.stop()
        if self.real_nodes is not None:
            await self.real_nodes.stop()
        if self.kubernetes is not None:
            await self.kubernetes.stop()
        if self.real_nodes is not None:
            await self.real_nodes.release()
        if self.server is not None:
            await self.server.stop()
        if self.server_process is not None:
            await self.server_process.stop()
        self._run_dir.remove()
        for setting in self._tuned:
            setting.release()
        self._tuned.clear()


def _signalled(stop: asyncio.Event, signalled: list[signal.Signals], sig: signal.Signals) -> None:
    signalled.append(sig)
    stop.set()


async def _started_unless_stopped(start: Coroutine[Any, Any, None], stop: asyncio.Event) -> bool:
    """Run ``start`` until it ends (True) or ``stop`` is set first (False: ``start`` is cancelled and waited for;
    what it started is the caller's to stop). A start can take minutes (a large fleet, a real control plane's
    first build), and Ctrl-C must not wait for it."""
    starting = asyncio.create_task(start, name="gpudra up: start")
    stopping = asyncio.create_task(stop.wait(), name="gpudra up: signal")
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if starting.done():
        starting.result()  # its error, if it failed
        return True
    starting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await starting
    return False


async def run_up(options: UpOptions, *, log_file: Path | None = None) -> int:
    console = Console()
    lock = DirectoryLock(options.kubeconfig.parent)
    lock.acquire()  # a second gpudra up in this directory stops here, naming the first
    if lock.taken_over is not None:
        console.print(
            f"Taking over {lock.directory} from a gpudra up that ended without stopping "
            f"(PID {lock.taken_over.get('pid')}); its nodes' state is discarded.",
            soft_wrap=True,
        )
    cluster = EmbeddedCluster(options)
    stop = asyncio.Event()
    signalled: list[signal.Signals] = []
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, partial(_signalled, stop, signalled, sig))
    started = time.monotonic()
    try:
        with start_progress(console) as progress:
            if not await _started_unless_stopped(cluster.start(progress), stop):
                console.print(
                    f"Stopped by {signalled[0].name} before the cluster was up; stopping what started."
                )
                return 128 + signalled[0].value
        assert cluster.client is not None
        lock.record(url=cluster.url)
        info = Summary(
            api_server=cluster.url,
            rows=await list_fleet(cluster.client),
            metrics_url=cluster.metrics_url,
            web_url=cluster.web_url,
            log_file=log_file,
            seconds=time.monotonic() - started,
            tries=tuple(try_next(options.kubeconfig, current_shell())),
        )
        print_summary(console, info)
        if not options.once:
            console.print("Ctrl-C stops it.")
        sys.stdout.flush()
        if not options.once:
            await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await cluster.stop()
        lock.release()
    return 0
