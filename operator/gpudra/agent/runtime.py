"""AgentRuntime: the node agent's two halves in one process.

The slice publisher (:class:`NodeAgent`) and the kubelet DRA plugin (:class:`ClaimPreparer` behind a
:class:`KubeletPlugin`; the MIG applier reserves devices through the preparer's :class:`DeviceReservations`).
Start-up order: serve and register the plugin (its calls wait), become the node's active instance
(:mod:`gpudra.agent.handover`: at once, or once the agent this one replaces has handed over), reconcile the
checkpoint and the CDI directory (:func:`recover`), then let the calls through and run the publishing loop and the
MigLayout sync. When a newer instance asks for the node, the active duties stop after the calls in flight and the
lock goes to it; on exit the plugin is deregistered and stopped.

Beside them, on nodes with multi-node NVLink, the compute-domain driver (:class:`ComputeDomainDriver`,
its own plugin, checkpoint and slice) runs in the same process and follows the GPU agent's readings.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from gpudra.agent.callsinflight import CallsInFlight
from gpudra.agent.cdi import ClaimSpecDir
from gpudra.agent.checkpoint import CheckpointStore
from gpudra.agent.claimeffects import ClaimEffects
from gpudra.agent.claimpreparer import ClaimPreparer, Hook, no_hook
from gpudra.agent.claimstatus import ClaimStatus
from gpudra.agent.devicenodes import device_root, mig_caps_major
from gpudra.agent.gpuplanner import PrepareOptions
from gpudra.agent.handover import ActiveRole, GatedHandler, HandoverLocks
from gpudra.agent.kubeletplugin import KubeletPlugin
from gpudra.agent.laterwrites import LaterWrites
from gpudra.agent.migdynamic.decisions import claimed_placements
from gpudra.agent.miglayout.applier import MigApplier
from gpudra.agent.miglayout.journal import PlanJournal
from gpudra.agent.miglayout.loop import MigSync
from gpudra.agent.node_agent import NodeAgent
from gpudra.agent.orphans import OrphanSweeper
from gpudra.agent.recovery import RecoveryReport, recover
from gpudra.agent.reservations import DeviceReservations
from gpudra.agent.startreading import StartReading
from gpudra.api.core import Node
from gpudra.api.meta import ObjectMeta
from gpudra.api.nvidia import SharingFeatures
from gpudra.config import AgentSettings
from gpudra.errors import CheckpointError, GpudraError
from gpudra.hardware.gpus.backend import GpuBackend
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.resources import NODES
from gpudra.metrics import Metrics
from gpudra.telemetry import get_logger

if (
    TYPE_CHECKING
):  # imported only where the setting serves it: a node with compute_domains=disabled never loads it
    from gpudra.agent.computedomain.driver import ComputeDomainDriver

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
        locks: HandoverLocks | None = None,
    ) -> None:
        self.settings = settings
        self.start = StartReading(backend, max_age_seconds=settings.hardware_poll_seconds)
        self.agent = NodeAgent(
            settings, backend, client, metrics, claimed_instances=self._claimed_instances, start=self.start
        )
        self._client = client
        self._metrics = metrics
        self._events = EventRecorder(client, f"gpudra-agent-{settings.node_name}", window_seconds=60)
        self.plugin_ready = asyncio.Event()
        self.recovery: RecoveryReport | None = None
        self.preparer: ClaimPreparer | None = None
        self.plugin: KubeletPlugin | None = None
        self.orphans: OrphanSweeper | None = None
        self.compute_domains: ComputeDomainDriver | None = None
        self.role = ActiveRole(
            settings.state_path, settings.instance_id, poll=settings.handover_poll_seconds, locks=locks
        )
        self.calls = CallsInFlight()
        """The kubelet's calls both drivers are answering: their claims' status writes wait for none."""
        if settings.serve_kubelet_plugin and settings.compute_domains != "disabled":
            from gpudra.agent.computedomain.driver import ComputeDomainDriver

            self.compute_domains = ComputeDomainDriver(
                settings,
                backend,
                client,
                metrics,
                report_problem=self._report_checkpoint_problem,
                role=self.role,
                calls=self.calls,
            )
            self.agent.inventory_listeners.append(self.compute_domains.observe)
        self.dynamic_gpus: frozenset[str] | None = None
        self.device_root = device_root(settings.driver_root, settings.driver_root_mount)
        """Where the host keeps the device nodes the CDI specs name, and where the agent sees them."""
        if settings.serve_kubelet_plugin:
            self._build_plugin(settings, backend, client, metrics, hook)
        applier = MigApplier(
            backend,
            PlanJournal(settings.state_path / MIG_PLAN_FILE, node=settings.node_name),
            node=settings.node_name,
            holders=self.preparer.reservations if self.preparer is not None else None,
            mark_dynamic=self._mark_dynamic,
            start=self.start,
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
            status=ClaimStatus(
                client,
                self._events,
                driver=settings.driver_name,
                node=settings.node_name,
                problems=self.agent.health.problems if settings.health_checks else None,
                later=LaterWrites(self.calls),
            ),
            reservations=DeviceReservations(store, shareable=self._shareable),
            effects=ClaimEffects(
                backend,
                ClaimSpecDir(settings.cdi_dir),
                data_dir=settings.plugin_path,
                claim_dirs=settings.plugin_path / "mps",
                hardware_changed=self.agent.poke,
            ),
            options=PrepareOptions(
                features=SharingFeatures(
                    time_slicing=settings.time_slicing_settings, mps=settings.mps_support
                ),
                mps_root=str(settings.plugin_path / "mps"),
                dev_root=str(self.device_root.host),
                mig_caps_major=mig_caps_major(settings),
                passthrough=settings.passthrough_support,
                device_metadata=settings.device_metadata,
            ),
            dynamic_gpus=self.agent.dynamic_gpus,
            metrics=metrics,
            hook=hook or no_hook,
        )
        self.plugin = KubeletPlugin(
            settings.driver_name,
            GatedHandler(self.preparer, self.role),
            plugin_dir=settings.plugin_path,
            registry_dir=settings.registry_dir,
            health_source=self.agent.health.reports if settings.health_checks else None,
            instance=settings.instance_id,
        )
        self.agent.health.listener = self._report_health
        self._health_refreshed = False
        self.orphans = OrphanSweeper(
            self.preparer,
            client,
            self.warn_node,
            grace=settings.orphan_grace_seconds,
            interval=settings.orphan_sweep_seconds,
            metrics=metrics,
        )

    def _claimed_instances(self) -> dict[str, list[tuple[str, int]]]:
        """Dynamic MIG instances recorded for claims (also those about to be created): the slices keep
        offering their placements, so an allocated device never disappears while its claim holds it."""
        if self.preparer is None:
            return {}
        records = [r for entry in self.preparer.store.claims().values() for r in entry.mig_instances_created]
        return claimed_placements(records)

    def _mark_dynamic(self, gpus: frozenset[str] | None) -> None:
        """The MigLayout applier's hand-off: these GPUs (UUIDs; MIG is on) follow claims, none for a Static
        layout, or None when no MigLayout governs the node (``mig_policy`` decides). UUIDs, not NVML indices:
        the applier's reading and the agent's may differ by a GPU bound to vfio-pci in between."""
        if gpus != self.dynamic_gpus:
            log.info("GPUs under dynamic MIG", node=self.settings.node_name, gpus=sorted(gpus or ()))
        self.dynamic_gpus = gpus
        self.agent.set_dynamic_gpus(None if gpus is None else set(gpus))

    def _shareable(self) -> list[str]:
        return [d.name for d in self.agent.devices if d.allow_multiple_allocations]

    async def _report_health(self) -> None:
        """Mark the claims prepared on devices whose health changed; the first time, every prepared claim (a
        previous agent may have left marks that no longer hold)."""
        if self.preparer is not None:
            await self.preparer.report_health(refresh=not self._health_refreshed)
            self._health_refreshed = True

    async def _report_checkpoint_problem(self, problem: CheckpointError) -> None:
        message = (
            f"prepared-claims checkpoint {problem.path or ''} cannot be trusted; started empty: {problem}"
        )
        await self.warn_node("CheckpointUnreadable", message)

    async def warn_node(self, reason: str, message: str) -> None:
        """A Warning Event on this agent's Node."""
        name = self.settings.node_name
        try:
            node = await self._client.get(NODES, name)
        except GpudraError:  # unreachable or unreadable: the Event names the node without its uid
            node = Node(metadata=ObjectMeta(name=name))
        await self._events.post(node, "Warning", reason, message)

    @property
    def handed_over(self) -> bool:
        """Whether a newer agent instance took the node from this one."""
        return bool(self.role.handed_to)

    async def _recover(self) -> None:
        """Reconcile the checkpoint and the CDI directory (the instance before this one may have changed them)."""
        if self.preparer is None:
            return
        self.recovery = await recover(
            self.preparer,
            report_problem=self._report_checkpoint_problem,
            metrics=self._metrics,
            bare_instances=True,
            start=self.start,
        )
        self.plugin_ready.set()

    async def stop_plugin(self) -> None:
        if self.plugin is not None:
            await self.plugin.stop()

    async def run(self) -> None:
        self.role.start()
        try:
            if self.plugin is not None:
                await self.plugin.start()
            while True:
                await self.role.acquire()
                await self._active_until_handed_over()
                await self.role.wait_orphaned()
        finally:
            await asyncio.shield(self.stop_plugin())
            self.role.stop()

    async def _active_until_handed_over(self) -> None:
        duties = asyncio.create_task(self._duties(), name=f"agent {self.settings.node_name}")
        holder = asyncio.create_task(self.role.hold(), name=f"handover {self.settings.node_name}")
        try:
            done, _ = await asyncio.wait({duties, holder}, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # the duties end only by an error; an error of the holder is no hand-over either
        finally:
            await asyncio.shield(self.role.drain())  # on the way out too: no call may outlive the lock
            await asyncio.shield(self._statuses_written())  # nor a claim status write after a call
            for task in (duties, holder):
                task.cancel()
            await asyncio.gather(duties, holder, return_exceptions=True)
            self.role.release()

    async def _statuses_written(self) -> None:
        if self.preparer is not None:
            await self.preparer.status.later.written()
        if self.compute_domains is not None:
            await self.compute_domains.preparer.status.later.written()

    async def _duties(self) -> None:
        """What only the active instance does."""
        await self.start.take()
        await self._recover()
        self.role.open()
        node = self.settings.node_name
        helpers = [asyncio.create_task(self.mig.run(), name=f"mig-{node}")]
        if self.orphans is not None:
            helpers.append(asyncio.create_task(self.orphans.run(), name=f"orphans-{node}"))
        try:
            if self.compute_domains is None:
                await self.agent.run()
            else:
                async with asyncio.TaskGroup() as group:
                    group.create_task(self.agent.run())
                    group.create_task(self.compute_domains.run())
        finally:
            for helper in helpers:
                helper.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
