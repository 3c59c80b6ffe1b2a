"""NVML event sets of the simulated NVML: registration per GPU and event type, a queue per set, blocking
waits.

Tests put events in with :meth:`EventHub.publish` (through FakeNvml.inject_xid / inject_ecc) and mark GPUs
lost with :meth:`EventHub.gpu_lost`: the next wait on a set that watches that GPU fails with GPU_IS_LOST, as
NVML's does when a GPU falls off the bus."""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from gpudra.hardware.simulated import nvml_types as t

WHOLE_GPU = 0xFFFFFFFF  # gpuInstanceId / computeInstanceId of an event that concerns the whole GPU


@dataclass(frozen=True)
class SimEvent:
    gpu: int
    event_type: int
    data: int
    gi_id: int = WHOLE_GPU
    ci_id: int = WHOLE_GPU


@dataclass
class _EventSet:
    registered: dict[int, int] = field(default_factory=dict)  # gpu index -> event mask
    queue: deque[SimEvent] = field(default_factory=deque)
    lost: set[int] = field(default_factory=set)  # GPUs lost since the last wait
    freed: bool = False


class EventHub:
    """Shares the FakeNvml's lock; waits release it (a Condition) so other NVML calls go on meanwhile."""

    def __init__(self, lock: threading.RLock) -> None:
        self._changed = threading.Condition(lock)
        self._sets: dict[int, _EventSet] = {}
        self._serials = itertools.count(1)
        self.listener: Callable[[], None] | None = None
        """Called (from the thread that published, holding the lock) after an event or a lost GPU reached the
        sets: a waiter that need not block in :meth:`wait` (the simulated nodes' health watch) looks then."""

    def create(self) -> int:
        with self._changed:
            serial = next(self._serials)
            self._sets[serial] = _EventSet()
            return serial

    def _get(self, serial: int) -> _EventSet:
        event_set = self._sets.get(serial)
        if event_set is None or event_set.freed:
            raise t.NVMLError_InvalidArgument(f"event set {serial} does not exist")
        return event_set

    def register(self, serial: int, gpu: int, mask: int) -> None:
        with self._changed:
            event_set = self._get(serial)
            event_set.registered[gpu] = event_set.registered.get(gpu, 0) | mask

    def free(self, serial: int) -> None:
        with self._changed:
            self._get(serial).freed = True
            del self._sets[serial]
            self._changed.notify_all()

    def publish(self, event: SimEvent) -> int:
        """Queue the event on every set watching its GPU and type; returns how many sets got it."""
        with self._changed:
            count = 0
            for event_set in self._sets.values():
                if event_set.registered.get(event.gpu, 0) & event.event_type:
                    event_set.queue.append(event)
                    count += 1
            self._changed.notify_all()
            self._tell()
            return count

    def gpu_lost(self, gpu: int) -> None:
        with self._changed:
            for event_set in self._sets.values():
                if gpu in event_set.registered:
                    event_set.lost.add(gpu)
            self._changed.notify_all()
            self._tell()

    def _tell(self) -> None:
        if self.listener is not None:
            self.listener()

    def wait(self, serial: int, timeout_ms: int) -> SimEvent:
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        with self._changed:
            while True:
                event_set = self._get(serial)
                if event_set.lost:
                    lost = sorted(event_set.lost)
                    event_set.lost.clear()
                    raise t.NVMLError_GpuIsLost(f"GPU {', '.join(map(str, lost))} fell off the bus")
                if event_set.queue:
                    return event_set.queue.popleft()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise t.NVMLError_Timeout(f"no event within {timeout_ms} ms")
                self._changed.wait(remaining)
