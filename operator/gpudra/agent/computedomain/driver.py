"""The compute-domain.nvidia.com driver: the second DRA driver the node agent serves on GB200-like nodes.

Same machinery as the GPU driver, its own instances: a checkpoint and CDI spec prefix of its own
(``k8s.compute-domain.nvidia.com-claim_<uid>.json``), its own plugin and registration sockets, its own
ResourceSlice (devices ``channel-0`` and ``daemon-0`` from ``computedomain.channels``), start-up recovery
before registration. The claims' plan comes from :class:`ComputeDomainPlanner`.

The node's NVLink clique is recomputed from every hardware reading of the GPU agent (no second NVML
poll). When it changes the driver

- sets or removes the Node label ``nvidia.com/gpu.clique`` (GFD's key and value);
- republishes its devices with attribute ``cliqueID`` (absent when in no clique) and, while the node is in
  no clique, the NoSchedule taint ``compute-domain.nvidia.com/no-clique`` (prepared claims stay, new
  claims go elsewhere);
- posts a Node Event when the GPUs disagree or lost their fabric.

``compute_domains=auto`` serves the driver only on nodes whose GPUs are built for multi-node NVLink
(``computedomain.clique.multi_node_nvlink`` on the first reading).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Final

from gpudra.agent.callsinflight import CallsInFlight
from gpudra.agent.cdi import ClaimSpecDir
from gpudra.agent.checkpoint import CheckpointStore
from gpudra.agent.claimeffects import ClaimEffects
from gpudra.agent.claimpreparer import ClaimPreparer
from gpudra.agent.claimstatus import ClaimStatus
from gpudra.agent.computedomain.planner import CD_VENDOR, ComputeDomainPlanner
from gpudra.agent.devicenodes import PROC_DEVICES, character_major
from gpudra.agent.handover import ActiveRole, GatedHandler
from gpudra.agent.kubeletplugin import KubeletPlugin
from gpudra.agent.laterwrites import LaterWrites
from gpudra.agent.publisher import SlicePublisher
from gpudra.agent.recovery import ProblemReporter, RecoveryReport, recover
from gpudra.agent.reservations import DeviceReservations
from gpudra.agent.slicesync import NodeRef
from gpudra.api.dra import Device, DeviceAttribute, DeviceTaint
from gpudra.computedomain import (
    CHANNEL_DEVICE,
    PROC_DEVICES_NAME,
    NodeClique,
    clique_label_patch,
    compute_domain_devices,
    multi_node_nvlink,
    node_clique,
    shared_pool_domain,
)
from gpudra.config import AgentSettings
from gpudra.errors import GpudraError, InvalidInputError, NotFoundError
from gpudra.hardware.gpus.backend import GpuBackend
from gpudra.hardware.gpus.inventory import NodeInventory
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.resources import NODES
from gpudra.metrics import Metrics
from gpudra.telemetry import get_logger

log = get_logger(__name__)
CHECKPOINT_FILE: Final = "checkpoint.json"
NO_CLIQUE_TAINT: Final = "compute-domain.nvidia.com/no-clique"
SIMULATED_CHANNEL_MAJOR: Final = 509
"""The channels' major in simulated nodes (no /proc/devices entry there)."""


def read_channel_major(proc_devices: Path = PROC_DEVICES) -> int:
    """The character-device major of the IMEX channels from /proc/devices."""
    major = character_major(PROC_DEVICES_NAME, proc_devices)
    if major is None:
        raise InvalidInputError(
            f"{proc_devices} has no {PROC_DEVICES_NAME} entry (or cannot be read): is the NVIDIA driver loaded with "
            "IMEX channels? (or set the imex_channel_major setting)"
        )
    return major


def published_devices(clique: NodeClique) -> list[Device]:
    """channel-0 (shared by the pods of one domain) and daemon-0, with the node's clique."""
    devices = []
    for device in compute_domain_devices(shared_channel=True):
        attributes = dict(device.attributes or {})
        update: dict[str, object] = {}
        if clique.clique_id:
            attributes["cliqueID"] = DeviceAttribute(string=clique.clique_id)
            update["attributes"] = attributes
        else:
            update["taints"] = [DeviceTaint(key=NO_CLIQUE_TAINT, value="true", effect="NoSchedule")]
        devices.append(device.model_copy(update=update))
    return devices


class ComputeDomainDriver:
    def __init__(
        self,
        settings: AgentSettings,
        backend: GpuBackend,
        client: KubeClient,
        metrics: Metrics,
        *,
        report_problem: ProblemReporter | None = None,
        role: ActiveRole | None = None,
        calls: CallsInFlight | None = None,
    ) -> None:
        """``role``: the node's hand-over (its calls are operations of the active instance, drained before a
        newer agent takes over); ``calls``: the node's kubelet calls in flight, shared with the GPU driver."""
        self.settings = settings
        calls = calls or CallsInFlight()
        self.driver = settings.compute_domain_driver_name
        self._client = client
        self._metrics = metrics
        self._events = EventRecorder(client, f"gpudra-agent-{settings.node_name}", window_seconds=60)
        self.clique = NodeClique("", "the GPUs were not read yet")
        self._inventory: NodeInventory | None = None
        self._changed = asyncio.Event()
        self.published = asyncio.Event()
        self.enabled: bool | None = None  # decided on the first reading
        self.recovery: RecoveryReport | None = None
        self._report_problem = report_problem
        state = settings.compute_domain_state_path
        store = CheckpointStore(state / CHECKPOINT_FILE, node=settings.node_name, driver=self.driver)
        plugin_dir = settings.compute_domain_plugin_path
        self.planner = ComputeDomainPlanner(
            client=client,
            store=store,
            node=settings.node_name,
            driver=self.driver,
            namespace=settings.driver_namespace,
            mode=settings.compute_domain_daemon_mode,
            clique=lambda: self.clique,
            channel_major=self._channel_major,
            domains_dir=plugin_dir / "domains",
            node_ip=settings.node_ip,
            daemon_wait=settings.compute_domain_daemon_wait_seconds,
            events=self._events,
            calls=calls,
        )
        self.preparer = ClaimPreparer(
            client=client,
            backend=backend,
            store=store,
            status=ClaimStatus(
                client,
                self._events,
                driver=self.driver,
                node=settings.node_name,
                shared_pool=self.shared_pool,
                later=LaterWrites(calls),
            ),
            reservations=DeviceReservations(store, shareable=lambda: [CHANNEL_DEVICE]),
            effects=ClaimEffects(backend, ClaimSpecDir(settings.cdi_dir, vendor=CD_VENDOR)),
            metrics=metrics,
            planner=self.planner,
            shared_pool=self.shared_pool,
        )
        self.plugin = KubeletPlugin(
            self.driver,
            self.preparer if role is None else GatedHandler(self.preparer, role),
            plugin_dir=plugin_dir,
            registry_dir=settings.registry_dir,
        )

    @staticmethod
    def shared_pool(pool: str) -> bool:
        """The pools whose devices this node prepares besides its own: PodGroup-scoped domains' channels."""
        return shared_pool_domain(pool) is not None

    def _channel_major(self) -> int:
        if self.settings.imex_channel_major is not None:
            return self.settings.imex_channel_major
        if self.settings.backend == "simulated":
            return SIMULATED_CHANNEL_MAJOR
        return read_channel_major()

    def observe(self, inventory: NodeInventory) -> None:
        """A hardware reading of the GPU agent (an inventory listener)."""
        if inventory != self._inventory:
            self._inventory = inventory
            self._changed.set()

    async def run(self) -> None:
        await self._changed.wait()
        inventory = self._inventory
        assert inventory is not None
        self.enabled = self.settings.compute_domains == "enabled" or multi_node_nvlink(inventory)
        if not self.enabled:
            log.info(
                "no multi-node NVLink on this node: compute-domain driver not served",
                node=inventory.node_name,
            )
            return
        if self._report_problem is None:
            self.recovery = await recover(self.preparer, metrics=self._metrics)
        else:
            self.recovery = await recover(
                self.preparer, report_problem=self._report_problem, metrics=self._metrics
            )
        await self.plugin.start()
        try:
            await self._loop()
        finally:
            await asyncio.shield(self.plugin.stop())

    async def _node_ref(self) -> NodeRef:
        name = self.settings.node_name
        while True:
            try:
                node = await self._client.get(NODES, name)
                return NodeRef(name=name, uid=node.metadata.uid or "")
            except NotFoundError:
                await asyncio.sleep(0.5)

    async def _loop(self) -> None:
        publisher = SlicePublisher(
            self._client,
            node=await self._node_ref(),
            driver=self.driver,
            metrics=self._metrics,
            max_devices_per_slice=self.settings.max_devices_per_slice,
        )
        assert self._inventory is not None
        self.clique = node_clique(self._inventory)
        await self.planner.restore()
        dirty = True
        while True:
            self._changed.clear()
            inventory = self._inventory
            assert inventory is not None
            clique = node_clique(inventory)
            if clique != self.clique or dirty:
                if clique != self.clique:
                    await self._clique_changed(self.clique, clique)
                self.clique = clique
                dirty = not await self._apply(publisher, clique)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._changed.wait(), timeout=1.0 if dirty else self.settings.full_resync_seconds
                )
            dirty = dirty or not self._changed.is_set()  # periodic resync repairs edited slices and labels

    async def _clique_changed(self, old: NodeClique, new: NodeClique) -> None:
        node = self.settings.node_name
        log.info(
            "NVLink clique changed",
            node=node,
            old=old.clique_id or None,
            new=new.clique_id or None,
            why=new.reason,
        )
        if new.problem:
            body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}
            await self._events.post(body, "Warning", "NVLinkCliqueLost", new.reason)

    async def _apply(self, publisher: SlicePublisher, clique: NodeClique) -> bool:
        """Label and slice follow the clique; False when it must be retried."""
        try:
            node = await self._client.get(NODES, self.settings.node_name)
            patch = clique_label_patch(node.metadata.labels or {}, clique)
            if patch is not None:
                await self._client.patch(NODES, self.settings.node_name, patch)
            await publisher.publish(published_devices(clique))
        except GpudraError as exc:
            log.warning(
                "publishing the node's clique failed; will retry",
                node=self.settings.node_name,
                error=str(exc),
            )
            return False
        self.published.set()
        return True
