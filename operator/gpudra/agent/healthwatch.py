"""GPU health, as the node agent follows and reports it.

A thread blocks in NVML's event wait (real NVML requires it) and hands each event to the event loop: it is
recorded in the :class:`~gpudra.agent.health.HealthState` (which says what taints follow), logged, posted as a
Warning Event on the Node, and the agent is woken to publish the taints. The agent tells this watch what it read and
what it published; once a publish carries a health change, :meth:`HealthWatch.report` tells the kubelet's health
stream (:meth:`HealthWatch.reports`) and the listener (the kubelet plugin marks the claims prepared on unhealthy
devices).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from gpudra.agent.health import DeviceProblem, HealthState
from gpudra.agent.kubeletplugin.messages import DeviceHealth, HealthStatus
from gpudra.api.dra import Device
from gpudra.config import AgentSettings
from gpudra.devices import gpu_device_name, mig_device_name
from gpudra.errors import GpudraError
from gpudra.hardware.gpus.backend import GpuBackend, HealthEvent
from gpudra.hardware.gpus.inventory import NodeInventory
from gpudra.telemetry import get_logger

log = get_logger(__name__)

Warn = Callable[[str, str], Awaitable[object]]
"""Posts a Warning Event on the Node: (reason, message)."""


class HealthWatch:
    def __init__(
        self, settings: AgentSettings, backend: GpuBackend, *, wake: Callable[[], None], warn: Warn
    ) -> None:
        self._node = settings.node_name
        self._backend = backend
        self._wake = wake
        self._warn = warn
        self._report_seconds = settings.health_report_seconds
        # No slower than the hardware poll: a simulated fleet of a thousand nodes polls slowly on purpose.
        self._wait_seconds = max(0.5, settings.hardware_poll_seconds)
        self.state = HealthState(
            ignored_xids=frozenset(settings.health_ignored_xids),
            recovery_seconds=settings.health_recovery_seconds,
            evicting_xids=frozenset(settings.health_noexecute_xids),
            evict_lost_gpus=settings.health_noexecute_gpu_lost,
        )
        self.listener: Callable[[], Awaitable[None]] | None = None
        """Called after a publish that changed device health (and after the first): the kubelet plugin marks
        the claims prepared on unhealthy devices."""
        self._stop = threading.Event()
        self._handling: set[asyncio.Future[None]] = set()  # events being handled (a listener's reads)
        self._changed = False  # an event came or a taint expired: the slices must change
        self._unreported = True  # the stream and the listener have not seen the published health yet
        self._tick = asyncio.Event()  # set (and replaced) when the published health changed
        self._inventory: NodeInventory | None = None
        self._device_names: list[str] = []

    # -- what the agent tells the watch ----------------------------------------------------------------------

    def changed(self, now: float) -> bool:
        """True once after the health changed (an event, or a taint that expired by ``now``): publish again."""
        if self.state.expire(now):
            log.info("devices recovered: health taints removed", node=self._node)
            self._changed = True
        if not self._changed:
            return False
        self._changed, self._unreported = False, True
        return True

    def hardware_read(self, inventory: NodeInventory, read_at: float) -> bool:
        """A fresh reading; True when a lost GPU is back (publish again)."""
        if not self.state.remember(inventory, read_at):
            return False
        log.info("a lost GPU is back", node=self._node)
        self._unreported = True
        return True

    def published(self, inventory: NodeInventory, devices: Sequence[Device]) -> None:
        """What the slices now offer."""
        self._inventory = inventory
        self._device_names = [d.name for d in devices]
        self.state.remember_published(devices)

    async def report(self) -> None:
        """After a publish that carried a health change: tell the stream's readers and the listener."""
        if not self._unreported:
            return
        self._unreported = False
        self._tick.set()
        self._tick = asyncio.Event()
        if self.listener is not None:
            try:
                await self.listener()
            except GpudraError as exc:
                log.warning("reporting device health failed; will retry", node=self._node, error=str(exc))
                self._unreported = True

    # -- what others read -------------------------------------------------------------------------------------

    def problems(self) -> dict[str, DeviceProblem]:
        """Device name -> why it is unhealthy, as published now (devices of lost GPUs included)."""
        return self.state.problems(self._inventory)

    async def reports(self) -> AsyncIterator[list[DeviceHealth]]:
        """The kubelet's health stream: the health of every device now, then again at each change and every
        ``health_report_seconds``. The kubelet counts a device's age from when a report naming it arrived and
        reads it as Unknown after ``health_check_timeout_seconds`` (three periods) without one."""
        period = self._report_seconds
        timeout = max(1, round(3 * period))
        while True:
            tick = self._tick
            problems = self.problems()
            names = sorted(set(self._device_names) | set(problems))
            now = int(time.time())
            yield [
                DeviceHealth(
                    pool_name=self._node,
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

    # -- the NVML event thread --------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the event thread; it hands events to the running loop until :meth:`stop`. A backend that tells
        when an event may be waiting (the simulated NVML) needs no thread: the loop reads what came then. A
        simulated fleet of thousands of nodes would otherwise run a thread a node, each started while the
        event loop waits for it."""
        loop = asyncio.get_running_loop()
        stop = self._stop = threading.Event()  # a fresh one: started again after a hand-over was taken back

        def look() -> None:
            loop.call_soon_threadsafe(self._read_waiting, stop)

        if self._backend.listen_for_health_events(look):
            self._read_waiting(stop)  # registers the GPUs' events, and takes any that came before
            return

        def watch() -> None:
            while not stop.is_set():
                try:
                    event = self._backend.wait_health_event(self._wait_seconds)
                except GpudraError as exc:
                    log.warning("health event wait failed", node=self._node, error=str(exc))
                    stop.wait(5.0)
                    continue
                if event is not None and not stop.is_set():
                    asyncio.run_coroutine_threadsafe(self._on_event(event), loop)

        threading.Thread(target=watch, name=f"health-{self._node}", daemon=True).start()

    def _read_waiting(self, stop: threading.Event) -> None:
        """In the loop: hand every event waiting now to :meth:`_on_event`."""
        while not stop.is_set():
            try:
                event = self._backend.wait_health_event(0)
            except GpudraError as exc:
                log.warning("health event wait failed", node=self._node, error=str(exc))
                return
            if event is None:
                return
            self._handling.add(task := asyncio.ensure_future(self._on_event(event)))
            task.add_done_callback(self._handling.discard)

    def stop(self) -> None:
        self._stop.set()
        self._backend.listen_for_health_events(None)

    async def _on_event(self, event: HealthEvent) -> None:
        taint = self.state.record(event, time.time())
        what = event_subject(event, self._inventory)
        detail = f"XID {event.xid}" if event.xid is not None else event.kind.value
        effect = taint.effect if taint is not None else "removed from the slices"
        log.warning("GPU health event", node=self._node, device=what, health=detail, effect=effect)
        self._changed = True
        self._wake()
        await self._warn("GpuHealth", f"{what}: {detail}; taint effect {effect}")


def event_subject(event: HealthEvent, inventory: NodeInventory | None) -> str:
    """What a health event is about, by the device name a claim or ResourceSlice uses and by UUID, as nvidia-smi
    and the driver's logs name it: ``gpu-3 (GPU-…)``, ``gpu-0-mig-1g5gb-19-0 (GPU-… MIG GI 9)``."""
    if event.gpu_uuid is None:
        return "a GPU NVML did not name"
    gi = f" MIG GI {event.gi_id}" if event.gi_id is not None else ""
    gpu = (
        next((g for g in inventory.gpus if g.uuid == event.gpu_uuid), None) if inventory is not None else None
    )
    if gpu is None:
        return f"GPU {event.gpu_uuid}{gi}"
    name = gpu_device_name(gpu.minor)
    mig = (
        next((m for m in gpu.mig_devices if m.gi_id == event.gi_id), None)
        if event.gi_id is not None
        else None
    )
    if mig is not None:
        name = mig_device_name(mig.parent_minor, mig.profile, mig.gi_profile_id, mig.placement_start)
    return f"{name} ({event.gpu_uuid}{gi})"
