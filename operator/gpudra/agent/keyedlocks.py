"""One asyncio lock per key (a claim's UID), kept only while someone holds or waits for it: a node prepares
thousands of claims over its life, and a lock for each would be kept for good."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class _Held:
    """A key's lock and how many hold it or wait for it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class KeyedLocks:
    def __init__(self) -> None:
        self._locks: dict[str, _Held] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """Hold the key's lock; those who asked for it before get it first (asyncio locks are fair)."""
        held = self._locks.get(key)
        if held is None:
            held = self._locks[key] = _Held()
        held.users += 1
        try:
            async with held.lock:
                yield
        finally:
            held.users -= 1
            if not held.users:
                del self._locks[key]
