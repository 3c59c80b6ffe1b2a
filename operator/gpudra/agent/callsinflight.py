"""How many of the kubelet's calls the node's drivers are answering now.

Writes that only inform (a claim's ``status.devices`` entry, a FailedPrepare Event) wait until none is, so that
their CPU, and the API server's, is not spent while pods wait on a burst of prepares; at most a bounded time, so a
node that is never idle still gets them written.
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

    async def none(self, at_most: float) -> None:
        """Return once no call is in flight, or after ``at_most`` seconds of waiting for that."""
        if self._none.is_set():
            return
        try:
            async with asyncio.timeout(at_most):
                await self._none.wait()
        except TimeoutError:
            pass
