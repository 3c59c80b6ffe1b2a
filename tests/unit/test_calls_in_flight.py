"""The count of the kubelet's calls a node answers, which the claims' status writes wait on: a call that waits on
something else (a compute-domain channel on its IMEX daemon) steps aside from it."""

from __future__ import annotations

import asyncio

from gpudra.agent.callsinflight import CallsInFlight


async def held_back(calls: CallsInFlight) -> asyncio.Task[None]:
    """A wait for no call in flight, once it has begun: one that does not wait has ended by then (it ends in the
    same step in which it says it began)."""
    began = asyncio.Event()

    async def wait() -> None:
        began.set()
        await calls.none()

    waiter = asyncio.create_task(wait())
    await began.wait()
    return waiter


async def test_a_call_aside_does_not_count_until_it_steps_back() -> None:
    calls = CallsInFlight()
    with calls.one():
        waiter = await held_back(calls)
        assert not waiter.done()
        with calls.aside():
            await asyncio.wait_for(waiter, 5)  # no call counts while the only one waits aside
        again = await held_back(calls)
        assert not again.done()  # it counts again
    await asyncio.wait_for(again, 5)


async def test_aside_with_another_call_in_flight_still_waits_for_that_one() -> None:
    calls = CallsInFlight()
    with calls.one(), calls.one(), calls.aside():
        waiter = await held_back(calls)
        assert not waiter.done()
    await asyncio.wait_for(waiter, 5)


async def test_aside_outside_any_call_changes_nothing() -> None:
    calls = CallsInFlight()
    with calls.aside():
        await asyncio.wait_for(calls.none(), 5)
    await asyncio.wait_for(calls.none(), 5)  # still none in flight
    with calls.one():
        waiter = await held_back(calls)
        assert not waiter.done()
    await asyncio.wait_for(waiter, 5)
