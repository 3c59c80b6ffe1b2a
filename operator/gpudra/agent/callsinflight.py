"""How many calls are being answered now, and a wait until none is.

Two users: the node's kubelet calls, for which writes that only inform (a claim's ``status.devices`` entry, a
FailedPrepare Event) wait, at most a bounded time, so that their CPU and the API server's is not spent while pods
wait on a burst of prepares (:mod:`gpudra.agent.laterwrites`); and an agent instance's operations (prepares,
unprepares, MIG steps), which a hand-over to a newer instance waits for (:mod:`gpudra.agent.handover`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager


class CallsInFlight:
    def __init__(self) -> None:
        self._count = 0
        self._none = asyncio.Event()
        self._none.set()

    @contextmanager
    def one(self) -> Iterator[None]:
        """A call is being answered while this is held."""
        self._count += 1
        self._none.clear()
        try:
            yield
        finally:
            self._count -= 1
            if not self._count:
                self._none.set()

    @contextmanager
    def aside(self) -> Iterator[None]:
        """Inside a call held by :meth:`one`: while this is held the call does not count, for it waits on something
        else and spends nothing meanwhile (a compute-domain channel's prepare waits up to 20 s for its IMEX
        daemon). Outside any call it changes nothing."""
        if not self._count:
            yield
            return
        self._count -= 1
        if not self._count:
            self._none.set()
        try:
            yield
        finally:
            self._count += 1
            self._none.clear()

    async def none(self, at_most: float | None = None) -> None:
        """Return once no call is in flight, or after ``at_most`` seconds of waiting for that (None: no limit)."""
        if self._none.is_set():
            return
        try:
            async with asyncio.timeout(at_most):
                await self._none.wait()
        except TimeoutError:
            pass
