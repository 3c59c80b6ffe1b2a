"""The node's inventory for prepares that run at once: each caller gets a reading of the GPUs that sees every change
gpudra made before it asked, and the callers that ask together share one.

Every prepare reads the whole node (which devices exist, their UUIDs and MIG instances) before it plans. With 56
claims prepared at once on a MIG-partitioned dgx-h100 that was 56 readings, one after another on one core; now it
is one or two.

A caller shares the reading under way when no change of the GPUs through the backend (:class:`ChangeCount`: MIG
instances, sharing settings, vfio bindings, by any claim's prepare or unprepare or the MIG layout) was in progress
when it began and none has begun since: that reading is as fresh for it as one that starts after it asked. Otherwise
it waits for the next reading, which starts after the one under way, and the callers that ask meanwhile share it. A
change made outside gpudra (``nvidia-smi``) while a reading runs is as racy with the kubelet's call either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gpudra.hardware.gpus.backend import ChangeCount
from gpudra.hardware.gpus.inventory import NodeInventory


class FreshInventory:
    def __init__(self, read: Callable[[], NodeInventory], changes: ChangeCount) -> None:
        self._read = read
        self._changes = changes
        self._reading = asyncio.Lock()  # one reading at a time
        self._next: asyncio.Future[NodeInventory] | None = None  # the reading not started yet
        self._under_way: tuple[asyncio.Future[NodeInventory], int | None] | None = None
        """The reading running now and the backend's change mark at its start."""
        self._tasks: set[asyncio.Task[None]] = set()

    async def read(self) -> NodeInventory:
        """A reading that sees every change made through the backend before this call (in a thread); a failed one
        raises its error to every caller."""
        under_way = self._under_way
        if under_way is not None and self._changes.none_since(under_way[1]):
            return await asyncio.shield(under_way[0])
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
            self._next = None  # who asks from now on shares this one, or needs one that starts after it
            self._under_way = (upcoming, self._changes.mark())
            try:
                inventory = await asyncio.to_thread(self._read)
            except asyncio.CancelledError:
                upcoming.cancel()
                raise
            except Exception as exc:
                upcoming.set_exception(exc)
            else:
                upcoming.set_result(inventory)
            finally:
                self._under_way = None


def _retrieve(future: asyncio.Future[NodeInventory]) -> None:
    """Mark a failed reading's error as seen when every caller has gone (cancelled), so asyncio does not log it."""
    if not future.cancelled():
        future.exception()
