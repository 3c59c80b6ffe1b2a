"""Writes that only inform, run in the background after the kubelet's answer: a claim's ``status.devices``
entries and its FailedPrepare Event (:mod:`gpudra.agent.claimstatus` says what they write, this module when).

The kubelet's answer, and so a pod's start, does not wait for them. They wait, too, until the node's drivers
answer no call (:class:`CallsInFlight`), at most ``defer_seconds``: a burst of prepares (a Job's pods landing on a
node at once) is answered before the writes take the agent's CPU and the API server's. One key's writes (a
claim's) run one at a time, in the order they were asked for: each holds the key's turn from its first step, the
wait included, so a prepare's Ready is never written over the unprepare that followed it. ``written`` waits for
them all (before the agent stops or hands the node over).
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
        self._background: set[asyncio.Task[None]] = set()

    def soon(self, key: str, write: Coroutine[Any, Any, None]) -> None:
        """Run ``write`` in the background, in the key's turn after its writes asked for before it, once no call
        is in flight (or ``defer_seconds`` passed)."""
        task = asyncio.create_task(self._in_turn(key, write), name=f"later write {key}")
        self._background.add(task)
        task.add_done_callback(self._ended)

    async def _in_turn(self, key: str, write: Coroutine[Any, Any, None]) -> None:
        try:
            async with self.turns.hold(key):
                await self.calls.none(self._defer_seconds)
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
