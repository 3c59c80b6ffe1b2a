"""Prepares that run at once share readings of the node's GPUs, and none gets a reading older than its call."""

from __future__ import annotations

import asyncio
import threading

from gpudra.agent.freshinventory import FreshInventory
from gpudra.errors import HardwareError
from gpudra.hardware.gpus.inventory import NodeInventory
from gpudra.testing import eventually


class SlowNode:
    """A node whose reading blocks until released; each reading is numbered (its driver version)."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.first_started = asyncio.Event()
        self.readings = 0
        self.release = threading.Event()
        self.fail = False

    def read(self) -> NodeInventory:
        self.readings += 1
        number = self.readings
        self.loop.call_soon_threadsafe(self.first_started.set)
        self.release.wait(10)
        if self.fail:
            raise HardwareError("NVML cannot read the GPUs")
        return NodeInventory(node_name="n", driver_version=str(number), cuda_driver_version="13.0", gpus=())


async def test_callers_during_a_reading_share_the_next_one_which_starts_after_they_asked() -> None:
    node = SlowNode()
    inventory = FreshInventory(node.read)
    first = asyncio.create_task(inventory.read())
    # reading 1 runs: what changed before the next callers asked may be missing from it
    await asyncio.wait_for(node.first_started.wait(), 10)
    asked = 0

    async def ask() -> NodeInventory:
        nonlocal asked
        asked += 1  # in the same step, read() joins the next reading before it first waits
        return await inventory.read()

    later = [asyncio.create_task(ask()) for _ in range(55)]
    await eventually(lambda: asked == 55, timeout=10, what="every later caller asked")
    node.release.set()
    answers = await asyncio.gather(first, *later)
    assert [a.driver_version for a in answers] == ["1"] + ["2"] * 55
    assert node.readings == 2


async def test_a_failed_reading_fails_every_caller_that_shared_it_and_the_next_call_reads_again() -> None:
    node = SlowNode()
    node.fail = True
    node.release.set()
    inventory = FreshInventory(node.read)
    results = await asyncio.gather(inventory.read(), inventory.read(), return_exceptions=True)
    assert all(isinstance(r, HardwareError) for r in results)
    node.fail = False
    assert (await inventory.read()).driver_version == "2"
