"""AgentRuntime: the node agent's two halves in one process.

The slice publisher (:class:`NodeAgent`) and the kubelet DRA plugin (:class:`ClaimPreparer` behind a
:class:`KubeletPlugin`). Start-up order: reconcile the checkpoint and the CDI directory first
(:func:`recover`), then serve the plugin sockets (the kubelet may call prepare right after registration),
then run the publishing loop; on exit the plugin is deregistered and stopped.

Beside them, on nodes with multi-node NVLink, the compute-domain driver (:class:`ComputeDomainDriver`,
its own plugin, checkpoint and slice) runs in the same process and follows the GPU agent's readings.
"""

from __future__ import annotations

import asyncio

from gpudra.agent.cdi import ClaimSpecDir
from gpudra.agent.checkpoint import CheckpointStore
from gpudra.agent.computedomain.driver import ComputeDomainDriver
from gpudra.agent.kubeletplugin import KubeletPlugin
from gpudra.agent.mig_applier import MigApplier
from gpudra.agent.mig_journal import PlanJournal
from gpudra.agent.mig_sync import MigSync
from gpudra.agent.node_agent import NodeAgent
from gpudra.agent.prepare import ClaimPreparer, Hook, no_hook
from gpudra.agent.recovery import RecoveryReport, recover
from gpudra.config import AgentSettings
from gpudra.errors import CheckpointError, KubeError
from gpudra.hardware.backend import GpuBackend
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.resources import NODES
from gpudra.metrics import Metrics
from gpudra.telemetry import get_logger

log = get_logger(__name__)
CHECKPOINT_FILE = "checkpoint.json"
MIG_PLAN_FILE = "mig-plan.json"


class AgentRuntime:
    def __init__(
        self,
        settings: AgentSettings,
        backend: GpuBackend,
        client: KubeClient,
        metrics: Metrics,
        *,
        hook: Hook | None = None,
    ) -> None:
        self.settings = settings
        self.agent = NodeAgent(settings, backend, client, metrics)
        self._client = client
        self._metrics = metrics
        self._events = EventRecorder(client, f"gpudra-agent-{settings.node_name}", window_seconds=60)
        self.plugin_ready = asyncio.Event()
        self.recovery: RecoveryReport | None = None
        self.preparer: ClaimPreparer | None = None
        self.plugin: KubeletPlugin | None = None
        self.compute_domains: ComputeDomainDriver | None = None
        if settings.serve_kubelet_plugin and settings.compute_domains != "disabled":
            self.compute_domains = ComputeDomainDriver(
                settings, backend, client, metrics, report_problem=self._report_checkpoint_problem
            )
            self.agent.inventory_listeners.append(self.compute_domains.observe)
        self.dynamic_gpus: frozenset[int] = frozenset()
        if settings.serve_kubelet_plugin:
            self._build_plugin(settings, backend, client, metrics, hook)
        applier = MigApplier(
            backend,
            PlanJournal(settings.state_path / MIG_PLAN_FILE, node=settings.node_name),
            node=settings.node_name,
            holders=self.preparer,
            mark_dynamic=self._mark_dynamic,
        )
        self.mig = MigSync(
            client,
            applier,
            node=settings.node_name,
            poke=self.agent.poke,
            retry_seconds=settings.mig_retry_seconds,
            events=self._events,
        )

    def _build_plugin(
        self,
        settings: AgentSettings,
        backend: GpuBackend,
        client: KubeClient,
        metrics: Metrics,
        hook: Hook | None,
    ) -> None:
        store = CheckpointStore(
            settings.state_path / CHECKPOINT_FILE, node=settings.node_name, driver=settings.driver_name
        )
        self.preparer = ClaimPreparer(
            client=client,
            backend=backend,
            store=store,
            specs=ClaimSpecDir(settings.cdi_dir),
            driver=settings.driver_name,
            node=settings.node_name,
            metrics=metrics,
            events=self._events,
            shareable=self._shareable,
            problems=self.agent.device_problems if settings.health_checks else None,
            mps_root=str(settings.plugin_path / "mps"),
            hook=hook or no_hook,
        )
        self.plugin = KubeletPlugin(
            settings.driver_name,
            self.preparer,
            plugin_dir=settings.plugin_path,
            registry_dir=settings.registry_dir,
            health_source=self.agent.health_reports if settings.health_checks else None,
        )
        self.agent.health_listener = self._report_health
        self._health_refreshed = False

    def _mark_dynamic(self, gpus: frozenset[int]) -> None:
        """The MigLayout Dynamic policy's hand-off: MIG is enabled on these GPUs and their instances follow claims.
        Dynamic MIG publication and prepare (the mig-dynamic work) take it from here."""
        if gpus != self.dynamic_gpus:
            log.info("GPUs under dynamic MIG", node=self.settings.node_name, gpus=sorted(gpus))
        self.dynamic_gpus = gpus

    def _shareable(self) -> list[str]:
        return [d.name for d in self.agent.devices if d.allow_multiple_allocations]

    async def _report_health(self) -> None:
        """Mark the claims prepared on devices whose health changed; the first time, every prepared claim (a
        previous agent may have left marks that no longer hold)."""
        if self.preparer is not None:
            await self.preparer.report_health(refresh=not self._health_refreshed)
            self._health_refreshed = True

    async def _report_checkpoint_problem(self, problem: CheckpointError) -> None:
        name = self.settings.node_name
        try:
            node = await self._client.get(NODES, name)
        except KubeError:
            node = {"metadata": {"name": name}}
        node.setdefault("apiVersion", "v1")
        node.setdefault("kind", "Node")
        message = (
            f"prepared-claims checkpoint {problem.path or ''} cannot be trusted; started empty: {problem}"
        )
        await self._events.post(node, "Warning", "CheckpointUnreadable", message)

    async def start_plugin(self) -> None:
        """Reconcile, then serve and register the kubelet plugin."""
        if self.preparer is None or self.plugin is None:
            return
        self.recovery = await recover(
            self.preparer, report_problem=self._report_checkpoint_problem, metrics=self._metrics
        )
        await self.plugin.start()
        self.plugin_ready.set()

    async def stop_plugin(self) -> None:
        if self.plugin is not None:
            await self.plugin.stop()

    async def run(self) -> None:
        mig: asyncio.Task[None] | None = None
        try:
            await self.start_plugin()
            mig = asyncio.create_task(self.mig.run(), name=f"mig-{self.settings.node_name}")
            if self.compute_domains is None:
                await self.agent.run()
            else:
                async with asyncio.TaskGroup() as group:
                    group.create_task(self.agent.run())
                    group.create_task(self.compute_domains.run())
        finally:
            if mig is not None:
                mig.cancel()
            await asyncio.shield(self.stop_plugin())
