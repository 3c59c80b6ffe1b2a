"""Writes that only inform, run in the background after the kubelet's answer: a claim's ``status.devices``
entries and its FailedPrepare Event (:mod:`gpudra.agent.claimstatus` says what they write, this module when).

The kubelet's answer, and so a pod's start, does not wait for them. They wait, too, until the node's drivers
answer no call (:class:`CallsInFlight`), at most ``defer_seconds``, so that a burst of prepares (a Job's pods
landing on a node at once) is answered before the writes take the agent's CPU and the API server's: one task waits
for that, then starts the writes asked for meanwhile. One key's writes (a claim's) run one at a time, in the order
they were asked for (they start in that order, and each holds the key's turn from its first step), so a prepare's
Ready is never written over the unprepare that followed it. ``written`` waits for them all (before the agent stops
or hands the node over).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from gpudra.agent.callsinflight import CallsInFlight
from gpudra.agent.keyedlocks import KeyedLocks
from gpudra.telemetry import get_logger

log = get_logger(__name__)
DEFER_SECONDS = 0.5
"""The longest a write waits for the node's calls to end: a node answering calls without a pause still gets its
claims' status within about this much."""


class LaterWrites:
    """``calls``: the node's calls in flight, shared by its drivers (each driver's preparer counts its calls
    there)."""

    def __init__(self, calls: CallsInFlight | None = None, *, defer_seconds: float = DEFER_SECONDS) -> None:
        self.calls = calls or CallsInFlight()
        self.turns = KeyedLocks()
        """Held by each write of a key from its first step; others that write the same thing (the health
        report) hold it too."""
        self._defer_seconds = defer_seconds
        self._pending: list[tuple[str, Coroutine[Any, Any, None]]] = []
        """Writes asked for and not started: one task waits for the calls to end, then starts them in order."""
        self._background: set[asyncio.Task[None]] = set()

    def soon(self, key: str, write: Coroutine[Any, Any, None]) -> None:
        """Run ``write`` in the background once no call is in flight (or ``defer_seconds`` passed), in the key's
        turn after its writes asked for before it."""
        self._pending.append((key, write))
        if len(self._pending) == 1:
            self._track(asyncio.create_task(self._release(), name="later writes"))

    async def _release(self) -> None:
        try:
            await self.calls.none(self._defer_seconds)
        except asyncio.CancelledError:
            for _, write in self._pending:
                write.close()  # never started: no "never awaited" warning
            self._pending.clear()
            raise
        pending, self._pending = self._pending, []
        for key, write in pending:  # tasks run their first step in the order made: each key's turns in order
            self._track(asyncio.create_task(self._in_turn(key, write), name=f"later write {key}"))

    def _track(self, task: asyncio.Task[None]) -> None:
        self._background.add(task)
        task.add_done_callback(self._ended)

    async def _in_turn(self, key: str, write: Coroutine[Any, Any, None]) -> None:
        try:
            async with self.turns.hold(key):
                await write
        finally:
            write.close()  # not awaited when cancelled before its turn: no "never awaited" warning

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("a write after the kubelet's answer failed", task=task.get_name(), error=repr(error))

    async def written(self) -> None:
        """Return once every write started in the background so far has ended."""
        while self._background:
            await asyncio.wait(set(self._background))
