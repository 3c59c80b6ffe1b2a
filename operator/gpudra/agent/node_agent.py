"""The node agent's main loop: read the GPUs, publish this node's ResourceSlices, keep them in sync.

A hardware change (a MIG instance created or destroyed, a GPU lost) is seen at the next poll and published at
once; ``poke()`` skips the wait when the agent itself changed the hardware. Every ``full_resync_seconds`` the slices
are re-listed and repaired even when the hardware did not change (someone deleted or edited them).

Dynamic MIG: GPUs in dynamic mode (``settings.mig_policy`` for all MIG-capable GPUs, or the set given to
:meth:`NodeAgent.set_dynamic_gpus` at run time) are published as partitionable devices with their counter sets
(:mod:`gpudra.devices.dynamic`), in the counter layout of the API server's version unless the setting names one.

List-typed attributes (``settings.list_attributes``): ``gpudra.dev/nvlinkPeers`` on full GPUs, only while the API
server keeps lists (:mod:`gpudra.agent.listattributes` checks).

Passthrough (``settings.passthrough_support``): every GPU that can be passed through is offered a second time as
``gpu-vfio-<i>`` (:mod:`gpudra.devices.passthrough`); a GPU the kubelet plugin bound to vfio-pci leaves NVML, so
the next reading publishes only its passthrough device.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any

from gpudra.agent.health import DeviceProblem, HealthState
from gpudra.agent.kubeletplugin.messages import DeviceHealth, HealthStatus
from gpudra.agent.listattributes import ListAttributes
from gpudra.agent.publisher import SlicePublisher
from gpudra.agent.slicesync import NodeRef
from gpudra.api.dra import Device, ResourceSlice
from gpudra.config import AgentSettings
from gpudra.devices.offer import NodeState, OfferSettings, node_offer
from gpudra.devices.slices import CounterLayout, counter_layout_for
from gpudra.errors import GpudraError, KubeError, NotFoundError
from gpudra.hardware.backend import GpuBackend, HealthEvent, MigProfileInfo
from gpudra.hardware.inventory import NodeInventory
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.informer import Informer
from gpudra.kube.resources import NODES, RESOURCE_SLICES
from gpudra.metrics import Metrics
from gpudra.telemetry import get_logger

log = get_logger(__name__)
PUBLISHED_LABEL = "gpudra.dev/resourceslices-published"
GENERATION_ANNOTATION = "gpudra.dev/resourceslices-generation"


def _attr(device: Device, name: str) -> str:
    attrs = device.attributes or {}
    return str(attrs[name].value) if name in attrs else ""


ClaimedInstances = Callable[[], Mapping[str, Iterable[tuple[str, int]]]]
"""GPU UUID -> (profile, placement start) of the MIG instances prepared (or being prepared) for claims."""


def _no_claims() -> Mapping[str, Iterable[tuple[str, int]]]:
    return {}


class NodeAgent:
    def __init__(
        self,
        settings: AgentSettings,
        backend: GpuBackend,
        client: KubeClient,
        metrics: Metrics,
        *,
        claimed_instances: ClaimedInstances = _no_claims,
    ) -> None:
        self.settings = settings
        self._backend = backend
        self._client = client
        self._metrics = metrics
        self._wake = asyncio.Event()
        self.published = asyncio.Event()  # set once the first publish succeeded
        self.inventory: NodeInventory | None = None
        self.devices: list[Device] = []
        self.publisher: SlicePublisher | None = None
        self._published_counts: set[tuple[str, str]] = set()
        self._node_mark: tuple[str, str] | None = None
        self.health = HealthState(
            ignored_xids=frozenset(settings.health_ignored_xids),
            recovery_seconds=settings.health_recovery_seconds,
            evicting_xids=frozenset(settings.health_noexecute_xids),
            evict_lost_gpus=settings.health_noexecute_gpu_lost,
        )
        self._events = EventRecorder(client, "gpudra-agent", window_seconds=60)
        self.lists = ListAttributes(
            client,
            enabled=settings.list_attributes,
            driver=settings.driver_name,
            node_name=settings.node_name,
            warn=lambda reason, message: self._events.post(self._node_object(), "Warning", reason, message),
        )
        self._informational_taints = False  # whether the server knows the taint effect None (set at start)
        self._health_stop = threading.Event()
        self._health_changed = False
        self._health_unreported = True  # the listener has not seen the current health yet
        self._health_tick = asyncio.Event()  # set (and replaced) when published health changed
        self.health_listener: Callable[[], Awaitable[None]] | None = None
        """Called after a publish that changed device health (and after the first): the kubelet plugin marks
        the claims prepared on unhealthy devices."""
        self._republish = False  # the dynamic-MIG GPUs changed: publish again
        self.claimed_instances = claimed_instances
        self._dynamic_override: frozenset[str] | None = None
        self._mig_profiles: dict[str, tuple[MigProfileInfo, ...]] = {}
        self.inventory_listeners: list[Callable[[NodeInventory], None]] = []
        """Called with every successful hardware reading (the compute-domain driver follows the fabric)."""

    # -- dynamic MIG -----------------------------------------------------------------------------------------

    def set_dynamic_gpus(self, uuids: set[str] | None) -> None:
        """Publish exactly these GPUs (by UUID) as dynamic MIG from now on; None: back to ``mig_policy``.
        GPUs without MIG, or with MIG mode off, stay published as they are. Takes effect at once."""
        wanted = None if uuids is None else frozenset(uuids)
        if wanted == self._dynamic_override:
            return
        self._dynamic_override = wanted
        self._republish = True
        log.info(
            "dynamic MIG GPUs set",
            node=self.settings.node_name,
            gpus=sorted(uuids) if uuids is not None else f"policy {self.settings.mig_policy}",
        )
        self.poke()

    def dynamic_gpus(self) -> frozenset[str]:
        """UUIDs of the GPUs published as dynamic MIG now (MIG-capable, MIG mode on, in dynamic mode)."""
        inventory = self.inventory
        if inventory is None:
            return frozenset()
        return frozenset(
            gpu.uuid
            for gpu in inventory.gpus
            if gpu.mig_capable and gpu.mig_enabled and self._wants_dynamic(gpu.uuid)
        )

    def _wants_dynamic(self, uuid: str) -> bool:
        wanted = self._dynamic_override
        return uuid in wanted if wanted is not None else self.settings.mig_policy == "Dynamic"

    def _profiles_of_dynamic(self, inventory: NodeInventory) -> dict[str, tuple[MigProfileInfo, ...]]:
        """GPU UUID -> its MIG profiles, for the GPUs that are dynamic in ``inventory`` (read once per GPU)."""
        out: dict[str, tuple[MigProfileInfo, ...]] = {}
        for gpu in inventory.gpus:
            if not (gpu.mig_capable and self._wants_dynamic(gpu.uuid)):
                continue
            if not gpu.mig_enabled:
                log.warning("dynamic MIG needs MIG mode on; the GPU is published whole", gpu=gpu.uuid)
                continue
            if gpu.uuid not in self._mig_profiles:
                self._mig_profiles[gpu.uuid] = self._backend.mig_profiles(gpu.index)
            out[gpu.uuid] = self._mig_profiles[gpu.uuid]
        return out

    async def _counter_layout(self) -> CounterLayout:
        """The shared-counter layout of the server's version; also learns whether it knows the taint effect None
        (Kubernetes 1.35+: a 1.34 API server refuses the whole slice that carries one)."""
        try:
            version = await self._client.server_version()
        except KubeError as exc:
            log.warning("server version unknown; shared counters in the 1.34 layout", error=str(exc))
            version = (1, 34)
        self._informational_taints = version >= (1, 35)
        if self.settings.counter_layout != "auto":
            return CounterLayout(self.settings.counter_layout)
        layout = counter_layout_for(*version)
        log.info("shared counter layout chosen", node=self.settings.node_name, layout=layout.value)
        return layout

    def poke(self) -> None:
        """Re-read the hardware now (after this agent changed it)."""
        self._wake.set()

    async def _node_ref(self) -> NodeRef:
        name = self.settings.node_name
        delay = 0.1
        while True:
            try:
                node = await self._client.get(NODES, name)
                return NodeRef(name=name, uid=node["metadata"]["uid"])
            except NotFoundError:
                log.warning("node object not found yet; waiting", node=name)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def run(self) -> None:
        node = await self._node_ref()
        self.publisher = SlicePublisher(
            self._client,
            node=node,
            driver=self.settings.driver_name,
            metrics=self._metrics,
            max_devices_per_slice=self.settings.max_devices_per_slice,
            layout=await self._counter_layout(),
        )
        last_full = 0.0
        dirty = True
        self._health_stop = threading.Event()  # a fresh one: run again after a hand-over was taken back
        if self.settings.health_checks:
            self._start_health_watch(asyncio.get_running_loop())
        selector = f"spec.nodeName={node.name},spec.driver={self.settings.driver_name}"
        watcher = asyncio.create_task(
            Informer(
                self._client,
                RESOURCE_SLICES,
                self._on_own_slice,
                field_selector=selector,
                parse=ResourceSlice.model_validate,
            ).run(),
            name=f"slice watch {node.name}",
        )
        try:
            await self._loop(last_full, dirty)
        finally:
            self._health_stop.set()
            watcher.cancel()

    async def _on_own_slice(self, kind: str, slice_: dict[str, Any]) -> None:
        """A kubelet deletes every ResourceSlice of its node when it starts (and a driver's once its plugin has
        been gone 30 s): publish again at once rather than at the next full resync, or the node offers no GPUs
        meanwhile. The agent's own deletions of obsolete slices come here too and cost one list."""
        if kind == "DELETED" and self.published.is_set():
            log.info(
                "a ResourceSlice of this node was deleted; publishing again",
                node=self.settings.node_name,
                slice=slice_.get("metadata", {}).get("name"),
            )
            self._republish = True
            self.poke()

    async def _loop(self, last_full: float, dirty: bool) -> None:
        node = self.settings.node_name
        while True:
            if self.health.expire(time.time()):
                log.info("devices recovered: health taints removed", node=self.settings.node_name)
                self._health_changed = True
            if self._health_changed:
                self._health_changed, dirty, self._health_unreported = False, True, True
            if self._republish:
                self._republish, dirty = False, True
            inventory: NodeInventory | None
            try:
                read_at = time.time()
                inventory = await asyncio.to_thread(self._backend.read_inventory)
                self._metrics.hardware_reads.labels(node, "ok").inc()
                if self.health.remember(inventory, read_at):
                    log.info("a lost GPU is back", node=node)
                    dirty, self._health_unreported = True, True
                for listener in self.inventory_listeners:
                    listener(inventory)
            except GpudraError as exc:
                self._metrics.hardware_reads.labels(node, "failed").inc()
                log.error("reading the GPUs failed; keeping the published slices", node=node, error=str(exc))
                inventory = self.inventory
            now = time.monotonic()
            if inventory is not None and (
                dirty or inventory != self.inventory or now - last_full >= self.settings.full_resync_seconds
            ):
                dirty = await self._publish(inventory)
                last_full = now if not dirty else last_full
            if not dirty and self._health_unreported:
                await self._report_health()
            await self._sleep()

    async def _report_health(self) -> None:
        """Tell the health stream's readers and the listener that the published health changed."""
        self._health_unreported = False
        self._health_tick.set()
        self._health_tick = asyncio.Event()
        if self.health_listener is not None:
            try:
                await self.health_listener()
            except GpudraError as exc:
                log.warning(
                    "reporting device health failed; will retry", node=self.settings.node_name, error=str(exc)
                )
                self._health_unreported = True

    def device_problems(self) -> dict[str, DeviceProblem]:
        """Device name -> why it is unhealthy, as published now (devices of lost GPUs included)."""
        return self.health.problems(self.inventory)

    async def health_reports(self) -> AsyncIterator[list[DeviceHealth]]:
        """The kubelet's health stream: the health of every device now, then again at each change and every
        ``health_report_seconds``. The kubelet counts a device's age from when a report naming it arrived and
        reads it as Unknown after ``health_check_timeout_seconds`` (three periods) without one."""
        period = self.settings.health_report_seconds
        timeout = max(1, round(3 * period))
        while True:
            tick = self._health_tick
            problems = self.device_problems()
            names = sorted({d.name for d in self.devices} | set(problems))
            now = int(time.time())
            yield [
                DeviceHealth(
                    pool_name=self.settings.node_name,
                    device_name=name,
                    health=HealthStatus.UNHEALTHY if name in problems else HealthStatus.HEALTHY,
                    last_updated_time=now,
                    health_check_timeout_seconds=timeout,
                    message=problems[name].message if name in problems else "",
                )
                for name in names
            ]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(tick.wait(), period)

    def _start_health_watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """A thread blocks in NVML's event wait (as real NVML requires) and hands events to the loop."""

        stop = self._health_stop
        # No slower than the hardware poll: a simulated fleet of a thousand nodes polls slowly on purpose.
        wait = max(0.5, self.settings.hardware_poll_seconds)

        def watch() -> None:
            while not stop.is_set():
                try:
                    event = self._backend.wait_health_event(wait)
                except GpudraError as exc:
                    log.warning("health event wait failed", node=self.settings.node_name, error=str(exc))
                    stop.wait(5.0)
                    continue
                if event is not None and not stop.is_set():
                    asyncio.run_coroutine_threadsafe(self._on_health(event), loop)

        threading.Thread(target=watch, name=f"health-{self.settings.node_name}", daemon=True).start()

    async def _on_health(self, event: HealthEvent) -> None:
        taint = self.health.record(event, time.time())
        what = f"GPU {event.gpu_uuid}" + (f" MIG GI {event.gi_id}" if event.gi_id is not None else "")
        detail = f"XID {event.xid}" if event.xid is not None else event.kind.value
        effect = taint.effect if taint is not None else "removed from the slices"
        log.warning(
            "GPU health event", node=self.settings.node_name, device=what, health=detail, effect=effect
        )
        self._health_changed = True
        self.poke()
        await self._events.post(
            self._node_object(), "Warning", "GpuHealth", f"{what}: {detail}; taint effect {effect}"
        )

    def _node_object(self) -> dict[str, Any]:
        """This node as an Event's involved object."""
        uid = self.publisher.node_uid if self.publisher is not None else ""
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.settings.node_name, "uid": uid}}

    async def _publish(self, inventory: NodeInventory) -> bool:
        """Publish; return True when it must be retried."""
        assert self.publisher is not None
        await self.lists.check_if_needed()
        try:
            dynamic = await asyncio.to_thread(self._profiles_of_dynamic, inventory)
            pci = (
                await asyncio.to_thread(self._backend.pci_gpus) if self.settings.passthrough_support else None
            )
            state = NodeState(
                dynamic=dynamic,
                claimed=self.claimed_instances(),
                pci_gpus=pci,
                gpu_taints=self.health.gpu_taints(),
                lost=self.health.lost_published(),
            )
            offered = node_offer(inventory, state, self._offer_settings())
        except GpudraError as exc:
            log.error("building the devices failed; will retry", node=inventory.node_name, error=str(exc))
            return True
        devices = offered.devices
        try:
            await self.publisher.publish(devices, offered.counter_sets)
        except GpudraError as exc:
            log.error(
                "publishing resourceslices failed; will retry", node=inventory.node_name, error=str(exc)
            )
            self.lists.write_refused(exc)
            return True
        self._record(inventory, devices)
        retry = await self._mark_node(True)
        self.published.set()  # after the Node says so: whoever waits on this sees the label too
        return retry

    def _offer_settings(self) -> OfferSettings:
        return OfferSettings(
            shared_gpu_replicas=self.settings.shared_gpu_replicas,
            nvlink_peers=self.lists.publish,
            informational_taints=self._informational_taints,
        )

    async def _mark_node(self, published: bool) -> bool:
        """Tell autoscalers and admins, on the Node, that this node's slices are published and current (label
        ``gpudra.dev/resourceslices-published``; annotation with the pool generation). Written only on change."""
        assert self.publisher is not None
        value = "true" if published else "false"
        generation = str(self.publisher.generation)
        if self._node_mark == (value, generation):
            return False
        patch = {
            "metadata": {
                "labels": {PUBLISHED_LABEL: value},
                "annotations": {GENERATION_ANNOTATION: generation},
            }
        }
        try:
            await self._client.patch(NODES, self.settings.node_name, patch)
        except GpudraError as exc:
            log.warning("marking the node failed; will retry", node=self.settings.node_name, error=str(exc))
            return True
        self._node_mark = (value, generation)
        return False

    async def unmark_node(self) -> None:
        """On a clean shutdown: the slices will go stale, say so."""
        if self.publisher is not None and self._node_mark is not None:
            await self._mark_node(False)

    def _record(self, inventory: NodeInventory, devices: list[Device]) -> None:
        if self.inventory is not None and inventory != self.inventory:
            log.info("hardware changed; slices republished", node=inventory.node_name, devices=len(devices))
        self.inventory, self.devices = inventory, devices
        self.health.remember_published(devices)
        dynamic = self.dynamic_gpus()
        for gpu in inventory.gpus:
            if gpu.mig_enabled and not gpu.mig_devices and gpu.uuid not in dynamic:
                log.warning("MIG is enabled on a GPU with no MIG devices: it is not published", gpu=gpu.uuid)
        counts = Counter((_attr(d, "type"), _attr(d, "profile")) for d in devices)
        gauge = self._metrics.devices_published
        for key in self._published_counts - set(counts):
            gauge.labels(inventory.node_name, self.settings.driver_name, *key).set(0)
        for key, n in counts.items():
            gauge.labels(inventory.node_name, self.settings.driver_name, *key).set(n)
        self._published_counts = set(counts)

    async def _sleep(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=self.settings.hardware_poll_seconds)
        self._wake.clear()
