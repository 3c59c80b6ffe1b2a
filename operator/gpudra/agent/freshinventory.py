"""The node's inventory for prepares that run at once: each caller gets a reading of the GPUs that started after
it asked (so it sees every change made before), and the callers that ask while a reading runs share the next one.

Every prepare reads the whole node (which devices exist, their UUIDs and MIG instances) before it plans. With 56
claims prepared at once on a MIG-partitioned dgx-h100 that was 56 readings, one after another on one core; now it
is two.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gpudra.hardware.gpus.inventory import NodeInventory


class FreshInventory:
    def __init__(self, read: Callable[[], NodeInventory]) -> None:
        self._read = read
        self._reading = asyncio.Lock()  # one reading at a time
        self._next: asyncio.Future[NodeInventory] | None = None  # the reading not started yet
        self._tasks: set[asyncio.Task[None]] = set()

    async def read(self) -> NodeInventory:
        """A reading that started after this call (in a thread); a failed one raises its error to every caller."""
        upcoming = self._next
        if upcoming is None:
            upcoming = self._next = asyncio.get_running_loop().create_future()
            upcoming.add_done_callback(_retrieve)
            task = asyncio.create_task(self._run(upcoming))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await asyncio.shield(upcoming)

    async def _run(self, upcoming: asyncio.Future[NodeInventory]) -> None:
        async with self._reading:
            self._next = None  # who asks from now on needs a reading that starts after this one
            try:
                inventory = await asyncio.to_thread(self._read)
            except asyncio.CancelledError:
                upcoming.cancel()
                raise
            except Exception as exc:
                upcoming.set_exception(exc)
            else:
                upcoming.set_result(inventory)


def _retrieve(future: asyncio.Future[NodeInventory]) -> None:
    """Mark a failed reading's error as seen when every caller has gone (cancelled), so asyncio does not log it."""
    if not future.cancelled():
        future.exception()
