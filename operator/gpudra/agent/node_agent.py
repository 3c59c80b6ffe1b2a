"""The node agent's main loop: read the GPUs, publish this node's ResourceSlices, keep them in sync.

A hardware change (a MIG instance created or destroyed, a GPU lost) is seen at the next poll and published at
once; ``poke()`` skips the wait when the agent itself changed the hardware. A change that leaves the devices as
last published (a dynamic MIG instance created for a claim) writes nothing and lists nothing: each dynamic GPU's
devices are built again only when what they are built from changed (:class:`gpudra.devices.DynamicMemo`), and the
publisher compares with what it last published. Every ``full_resync_seconds``, after a deleted slice, a health
change or a failed publish, the slices are re-listed and repaired (someone deleted or edited them).

The loop composes one object per other job: the GPU health watch (:mod:`gpudra.agent.healthwatch`: NVML's events,
the taints, the kubelet's health stream), which GPUs are dynamic MIG (:mod:`gpudra.agent.migdynamic.selection`),
the Node's published label and generation annotation (:mod:`gpudra.agent.nodemark`), whether list attributes are
published (:mod:`gpudra.agent.listattributes`) and the devices-published gauge (:mod:`gpudra.agent.devicecounts`).

Dynamic MIG: GPUs in dynamic mode (``settings.mig_policy`` for all MIG-capable GPUs, or the set given to
:meth:`NodeAgent.set_dynamic_gpus` at run time) are published as partitionable devices with their counter sets
(:mod:`gpudra.devices.dynamic`), in the counter layout of the API server's version unless the setting names one.

Passthrough (``settings.passthrough_support``): every GPU that can be passed through is offered a second time as
``gpu-vfio-<i>`` (:mod:`gpudra.devices.passthrough`); a GPU the kubelet plugin bound to vfio-pci leaves NVML, so
the next reading publishes only its passthrough device.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpudra.agent.devicecounts import PublishedDeviceCounts
from gpudra.agent.healthwatch import HealthWatch
from gpudra.agent.listattributes import ListAttributes
from gpudra.agent.migdynamic.selection import DynamicSelection
from gpudra.agent.nodemark import NodeMark
from gpudra.agent.publisher import SlicePublisher
from gpudra.agent.slicesync import NodeRef
from gpudra.agent.startreading import StartReading
from gpudra.api.dra import Device
from gpudra.api.meta import PartialObjectMetadata
from gpudra.config import AgentSettings
from gpudra.devices import (
    CounterLayout,
    DynamicMemo,
    NodeState,
    OfferSettings,
    counter_layout_for,
    node_offer,
)
from gpudra.errors import GpudraError, KubeError, NotFoundError, is_transient
from gpudra.hardware.gpus.backend import GpuBackend
from gpudra.hardware.gpus.inventory import NodeInventory
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.informer import Informer
from gpudra.kube.resources import NODES, RESOURCE_SLICES
from gpudra.metrics import Metrics
from gpudra.telemetry import get_logger

log = get_logger(__name__)

GPU_READING_INCOMPLETE = "GpuReadingIncomplete"
"""Event reason: an NVML call on a GPU failed or answered what cannot be published; the GPU is published without it."""
GPU_NOT_PUBLISHED = "GpuNotPublished"
"""Event reason: an NVML call without whose answer a GPU cannot be published failed on it; its other GPUs are."""

ClaimedInstances = Callable[[], Mapping[str, Iterable[tuple[str, int]]]]
"""GPU UUID -> (profile, placement start) of the MIG instances prepared (or being prepared) for claims."""


def _no_claims() -> Mapping[str, Iterable[tuple[str, int]]]:
    return {}


def _union(
    *claimed: Mapping[str, Iterable[tuple[str, int]]],
) -> dict[str, set[tuple[str, int]]]:
    out: dict[str, set[tuple[str, int]]] = {}
    for mapping in claimed:
        for uuid, placements in mapping.items():
            out.setdefault(uuid, set()).update(placements)
    return out


class NodeAgent:
    """Reads the hardware and publishes; composes the health watch (:attr:`health`), the dynamic-MIG selection,
    the Node's mark, the list-attribute check (:attr:`lists`) and the devices-published gauge."""

    def __init__(
        self,
        settings: AgentSettings,
        backend: GpuBackend,
        client: KubeClient,
        metrics: Metrics,
        *,
        claimed_instances: ClaimedInstances = _no_claims,
        start: StartReading | None = None,
    ) -> None:
        self.settings = settings
        self._backend = backend
        self._start = start  # the first pass publishes the agent's start reading while it is current
        self._client = client
        self._metrics = metrics
        self._wake = asyncio.Event()
        self.published = asyncio.Event()  # set once the first publish succeeded
        self.inventory: NodeInventory | None = None
        self.devices: list[Device] = []
        self.publisher: SlicePublisher | None = None
        self._events = EventRecorder(client, "gpudra-agent", window_seconds=60)
        self.health = HealthWatch(settings, backend, wake=self.poke, warn=self._warn)
        self._dynamic = DynamicSelection(
            node=settings.node_name, mig_policy=settings.mig_policy, read_profiles=backend.mig_profiles
        )
        self._node_mark = NodeMark(client, settings.node_name)
        self.lists = ListAttributes(
            client,
            enabled=settings.list_attributes,
            driver=settings.driver_name,
            node_name=settings.node_name,
            warn=self._warn,
        )
        self._counts = PublishedDeviceCounts(metrics, node=settings.node_name, driver=settings.driver_name)
        self._built = DynamicMemo()  # a dynamic GPU is rebuilt only when what it publishes changed
        self._informational_taints = False  # whether the server knows the taint effect None (set at start)
        self._republish = False  # publish again even if the hardware did not change
        self.claimed_instances = claimed_instances
        self.inventory_listeners: list[Callable[[NodeInventory], None]] = []
        """Called with every successful hardware reading (the compute-domain driver follows the fabric)."""

    def set_dynamic_gpus(self, uuids: set[str] | None) -> None:
        """Publish exactly these GPUs (by UUID) as dynamic MIG from now on; None: back to ``mig_policy``.
        GPUs without MIG, or with MIG mode off, stay published as they are. Takes effect at once."""
        if self._dynamic.choose(uuids):
            self._republish = True
            self.poke()

    def dynamic_gpus(self) -> frozenset[str]:
        """UUIDs of the GPUs published as dynamic MIG now (MIG-capable, MIG mode on, in dynamic mode)."""
        return self._dynamic.gpus(self.inventory)

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
        """This node's Node, waiting for it (a kubelet registers it) and for the API server (an agent may start
        while it is down or starting), with one log line per attempt, as a DaemonSet pod would be restarted."""
        name = self.settings.node_name
        delay, attempt = 0.1, 0
        while True:
            attempt += 1
            try:
                node = await self._client.get(NODES, name)
                return NodeRef(name=name, uid=node.metadata.uid or "")
            except NotFoundError:
                log.warning("node object not found yet; waiting", node=name, attempt=attempt, retry_in=delay)
            except KubeError as exc:
                if not is_transient(exc):
                    raise
                log.warning(
                    "API server not reachable yet; waiting",
                    node=name,
                    attempt=attempt,
                    retry_in=delay,
                    error=str(exc),
                )
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
        if self.settings.health_checks:
            self.health.start()
        selector = f"spec.nodeName={node.name},spec.driver={self.settings.driver_name}"
        watcher = asyncio.create_task(
            # parsed for their metadata only: only deletions matter here, and parsing each of the node's slices
            # whole again cost as much as building them
            Informer(
                self._client,
                RESOURCE_SLICES,
                self._on_own_slice,
                field_selector=selector,
                parse=PartialObjectMetadata.model_validate,
            ).run(),
            name=f"slice watch {node.name}",
        )
        try:
            await self._loop()
        finally:
            self.health.stop()
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

    async def _loop(self) -> None:
        node = self.settings.node_name
        last_full, dirty = 0.0, True
        start = self._start.current() if self._start is not None else None
        while True:
            if self.health.changed(time.time()):
                dirty = True
            if self._republish:
                self._republish, dirty = False, True
            inventory: NodeInventory | None
            # a copy, before the reading: see _publish (for the start reading, no instance was forgotten since it
            # began: forgetting one follows destroying it, a change after which the start reading is not current)
            claimed = _union(self.claimed_instances())
            try:
                if start is not None:
                    read_at, inventory, start = start.read_at, start.inventory, None
                else:
                    read_at = time.time()
                    inventory = await asyncio.to_thread(self._backend.read_inventory)
                self._metrics.hardware_reads.labels(node, "ok").inc()
                if self.health.hardware_read(inventory, read_at):
                    dirty = True
                await self._report_problems(inventory)
                for listener in self.inventory_listeners:
                    listener(inventory)
            except GpudraError as exc:
                self._metrics.hardware_reads.labels(node, "failed").inc()
                log.error("reading the GPUs failed; keeping the published slices", node=node, error=str(exc))
                inventory = self.inventory
            now = time.monotonic()
            full = dirty or now - last_full >= self.settings.full_resync_seconds
            if inventory is not None and (full or inventory != self.inventory):
                dirty = await self._publish(inventory, claimed, recheck=full)
                last_full = now if full and not dirty else last_full
            if not dirty:
                await self.health.report()
            await self._sleep()

    async def _report_problems(self, inventory: NodeInventory) -> None:
        """What NVML could not say about a GPU: logged when it changes, a Warning Event on the Node (repeated
        at most once a minute while it lasts). The GPU is published without it, or left out; the others are
        published all the same."""
        previous = self.inventory.problems if self.inventory is not None else ()
        for problem in inventory.problems:
            if problem not in previous:
                log.warning(
                    "a GPU reading is incomplete", node=self.settings.node_name, problem=problem.message
                )
            reason = GPU_READING_INCOMPLETE if problem.published else GPU_NOT_PUBLISHED
            await self._warn(reason, problem.message)

    async def _warn(self, reason: str, message: str) -> None:
        """A Warning Event on this Node."""
        uid = self.publisher.node_uid if self.publisher is not None else ""
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.settings.node_name, "uid": uid}}
        await self._events.post(node, "Warning", reason, message)

    async def _publish(
        self, inventory: NodeInventory, claimed: Mapping[str, Iterable[tuple[str, int]]], *, recheck: bool
    ) -> bool:
        """Publish; return True when it must be retried. ``claimed``: the claims' instances when the reading
        began. Those recorded now are added: an instance in the reading was claimed then or is claimed now (a
        claim records its instance before creating it and forgets it after destroying it), or it is foreign.
        Without ``recheck`` (the hardware changed, nothing else), devices equal to the last published ones are
        not compared with the server's slices again."""
        assert self.publisher is not None
        await self.lists.check_if_needed()
        try:
            dynamic = await asyncio.to_thread(self._dynamic.profiles, inventory)
            pci = (
                await asyncio.to_thread(self._backend.pci_gpus) if self.settings.passthrough_support else None
            )
            state = NodeState(
                dynamic=dynamic,
                claimed=_union(claimed, self.claimed_instances()),
                pci_gpus=pci,
                gpu_taints=self.health.state.gpu_taints(),
                lost=self.health.state.lost_published(),
            )
            offered = node_offer(inventory, state, self._offer_settings(), self._built)
        except GpudraError as exc:
            log.error("building the devices failed; will retry", node=inventory.node_name, error=str(exc))
            return True
        devices = offered.devices
        try:
            await self.publisher.publish(devices, offered.counter_sets, recheck=recheck)
        except GpudraError as exc:
            log.error(
                "publishing resourceslices failed; will retry", node=inventory.node_name, error=str(exc)
            )
            self.lists.write_refused(exc)
            return True
        self._record(inventory, devices)
        retry = await self._node_mark.mark(published=True, generation=self.publisher.generation)
        self.published.set()  # after the Node says so: whoever waits on this sees the label too
        return retry

    def _offer_settings(self) -> OfferSettings:
        return OfferSettings(
            shared_gpu_replicas=self.settings.shared_gpu_replicas,
            nvlink_peers=self.lists.publish,
            informational_taints=self._informational_taints,
        )

    async def unmark_node(self) -> None:
        """On a clean shutdown: the slices will go stale, say so on the Node (if this agent marked it)."""
        if self.publisher is not None and self._node_mark.written:
            await self._node_mark.mark(published=False, generation=self.publisher.generation)

    def _record(self, inventory: NodeInventory, devices: list[Device]) -> None:
        if self.inventory is not None and inventory != self.inventory:
            log.info("hardware changed; slices republished", node=inventory.node_name, devices=len(devices))
        self.inventory, self.devices = inventory, devices
        self.health.published(inventory, devices)
        dynamic = self.dynamic_gpus()
        for gpu in inventory.gpus:
            if gpu.mig_enabled and not gpu.mig_devices and gpu.uuid not in dynamic:
                log.warning("MIG is enabled on a GPU with no MIG devices: it is not published", gpu=gpu.uuid)
        self._counts.show(devices)

    async def _sleep(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=self.settings.hardware_poll_seconds)
        self._wake.clear()
