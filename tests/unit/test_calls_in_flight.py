"""The count of the kubelet's calls a node answers, which the claims' status writes wait on: a call that waits on
something else (a compute-domain channel on its IMEX daemon) steps aside from it."""

from __future__ import annotations

import asyncio

from gpudra.agent.callsinflight import CallsInFlight


async def held_back(calls: CallsInFlight) -> asyncio.Task[None]:
    """A wait for no call in flight, once it has had its chance to return."""
    waiter = asyncio.create_task(calls.none())
    await asyncio.sleep(0)  # one pass of the event loop: a wait that may return has returned
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
