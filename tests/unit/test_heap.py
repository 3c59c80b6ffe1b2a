"""A standalone agent or controller leaves its start-up heap out of later full collections once it has started."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from gpudra.heap import freeze_when_started


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


async def test_the_heap_is_frozen_only_after_the_process_started(unfrozen: None) -> None:
    started = asyncio.Event()
    freezing = asyncio.create_task(freeze_when_started(started))
    assert gc.get_freeze_count() == 0
    started.set()
    await asyncio.wait_for(freezing, timeout=10)
    assert gc.get_freeze_count() > 0
