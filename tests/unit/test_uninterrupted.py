"""to_the_end: a step a cancellation must not cut in half ends first, then the cancellation goes on."""

from __future__ import annotations

import asyncio
import threading

import pytest

from gpudra.agent.uninterrupted import to_the_end


async def test_a_thread_step_ends_before_the_cancellation_is_raised() -> None:
    entered, release = threading.Event(), threading.Event()
    changes: list[str] = []

    def create() -> str:
        entered.set()
        release.wait(timeout=30)
        changes.append("instance created")
        return "MIG-1"

    caller = asyncio.create_task(to_the_end(asyncio.to_thread(create)))
    caller.add_done_callback(lambda _: changes.append("caller ended"))
    await asyncio.to_thread(entered.wait, 30)
    caller.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    # the change was made before the caller ended with its cancellation, never after it
    assert changes == ["instance created", "caller ended"]


async def test_without_a_cancellation_the_result_and_the_errors_pass_through() -> None:
    async def answer() -> int:
        return 42

    async def fail() -> int:
        raise ValueError("memory slices overlap")

    assert await to_the_end(answer()) == 42
    with pytest.raises(ValueError, match="overlap"):
        await to_the_end(fail())


async def test_a_step_that_fails_after_a_cancellation_raises_the_cancellation() -> None:
    started, go_on = asyncio.Event(), asyncio.Event()

    async def step() -> None:
        started.set()
        await go_on.wait()
        raise ValueError("NVML_ERROR_IN_USE")

    caller = asyncio.create_task(to_the_end(step()))
    await started.wait()
    caller.cancel()
    go_on.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
