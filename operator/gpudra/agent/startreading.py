"""One reading of the GPUs when the agent takes up its node, for the three that used to read them one after another
at that moment: the recovery's look for bare GPU instances, the MIG layout's first report and the first publish.

A reading is as good to them as a new one while it is younger than the hardware poll (the agent re-reads its GPUs
that often anyway, so no consumer was promised a fresher one) and gpudra changed no GPU since it began
(:class:`gpudra.hardware.gpus.backend.ChangeCount`: a claim undone by the recovery, a MIG layout applied, a
sharing setting restored all count). Otherwise each reads afresh, as before: an agent's start read its GPUs four
times, now once.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from gpudra.errors import GpudraError
from gpudra.hardware.gpus.backend import GpuBackend
from gpudra.hardware.gpus.inventory import NodeInventory
from gpudra.telemetry import get_logger

log = get_logger(__name__)


@dataclass(frozen=True)
class Reading:
    inventory: NodeInventory
    mark: int | None
    """The backend's change mark just before it began (:meth:`ChangeCount.mark`)."""
    read_at: float
    """When it began, wall clock."""


class StartReading:
    def __init__(self, backend: GpuBackend, *, max_age_seconds: float) -> None:
        self._backend = backend
        self._max_age = max_age_seconds
        self._taken: tuple[Reading, float] | None = None  # and when it began, monotonic

    async def take(self) -> None:
        """Read every GPU, NVLink peers included (in a thread). A failed reading is logged and leaves none: each
        consumer then reads for itself and meets the error its own way."""
        self._taken = None
        mark = self._backend.changes.mark()
        began, wall = time.monotonic(), time.time()
        try:
            inventory = await asyncio.to_thread(self._backend.read_inventory)
        except GpudraError as exc:
            log.warning("reading the GPUs at start failed", node=self._backend.node_name, error=str(exc))
            return
        self._taken = (Reading(inventory, mark, wall), began)

    def current(self) -> Reading | None:
        """The reading while it is younger than the hardware poll and gpudra changed no GPU since it began."""
        if self._taken is None:
            return None
        reading, began = self._taken
        if time.monotonic() - began >= self._max_age or not self._backend.changes.none_since(reading.mark):
            return None
        return reading
