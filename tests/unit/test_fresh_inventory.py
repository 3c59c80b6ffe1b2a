"""Prepares that run at once share readings of the node's GPUs, and none gets a reading that may miss a change gpudra
made to the GPUs before its call."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from gpudra.agent.freshinventory import FreshInventory
from gpudra.errors import HardwareError
from gpudra.hardware.gpus.backend import ChangeCount
from gpudra.hardware.gpus.inventory import NodeInventory
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.hardware.simulated.fake_nvml import FakeNvml
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


async def start_reading(inventory: FreshInventory, node: SlowNode) -> asyncio.Task[NodeInventory]:
    """A first caller, once its reading (reading 1) runs."""
    first = asyncio.create_task(inventory.read())
    await asyncio.wait_for(node.first_started.wait(), 10)
    return first


async def ask(inventory: FreshInventory, callers: int) -> list[asyncio.Task[NodeInventory]]:
    """``callers`` more, each once it has asked."""
    asked = 0

    async def one() -> NodeInventory:
        nonlocal asked
        asked += 1  # in the same step, read() joins a reading before it first waits
        return await inventory.read()

    later = [asyncio.create_task(one()) for _ in range(callers)]
    await eventually(lambda: asked == callers, timeout=10, what="every later caller asked")
    return later


async def test_callers_during_a_reading_share_it_while_gpudra_changed_no_gpu() -> None:
    """The prepares of a burst ask one after another as their claims arrive: one reading serves them all."""
    node = SlowNode()
    inventory = FreshInventory(node.read, ChangeCount())
    first = await start_reading(inventory, node)
    later = await ask(inventory, 55)
    node.release.set()
    answers = await asyncio.gather(first, *later)
    assert {a.driver_version for a in answers} == {"1"}
    assert node.readings == 1


async def test_callers_after_a_change_began_share_the_next_reading_which_starts_after_they_asked() -> None:
    """Another claim's prepare or unprepare began changing a GPU (an instance destroyed, a compute mode reset)
    while reading 1 ran: who asks from then on gets a reading that starts after it asked."""
    node = SlowNode()
    changes = ChangeCount()
    inventory = FreshInventory(node.read, changes)
    first = await start_reading(inventory, node)
    with changes.one():
        later = await ask(inventory, 55)
    node.release.set()
    answers = await asyncio.gather(first, *later)
    assert [a.driver_version for a in answers] == ["1"] + ["2"] * 55
    assert node.readings == 2


async def test_a_reading_begun_during_a_change_is_not_shared_with_later_callers() -> None:
    """A change in progress when reading 1 began may be half in it: a caller asking once the change ended (no new
    one begun) waits for the next reading."""
    node = SlowNode()
    changes = ChangeCount()
    inventory = FreshInventory(node.read, changes)
    with changes.one():
        first = await start_reading(inventory, node)
    later = await ask(inventory, 3)
    node.release.set()
    answers = await asyncio.gather(first, *later)
    assert [a.driver_version for a in answers] == ["1"] + ["2"] * 3


async def test_a_failed_reading_fails_every_caller_that_shared_it_and_the_next_call_reads_again() -> None:
    node = SlowNode()
    node.fail = True
    node.release.set()
    inventory = FreshInventory(node.read, ChangeCount())
    results = await asyncio.gather(inventory.read(), inventory.read(), return_exceptions=True)
    assert all(isinstance(r, HardwareError) for r in results)
    node.fail = False
    assert (await inventory.read()).driver_version == "2"


def test_every_change_of_the_gpus_through_the_backend_is_counted_begun_and_ended() -> None:
    """The sharing above is safe only if each change gpudra makes to the GPUs is counted: MIG mode and instances,
    sharing settings (passthrough's bind and give-back are counted the same way, on a passthrough node)."""
    fake = FakeNvml.from_profile("dgx-h100", node_name="n")
    backend = NvmlBackend("n", nvml=fake)
    uuid = backend.read_inventory().gpus[1].uuid
    changes: list[Callable[[], object]] = [
        lambda: backend.set_compute_mode(uuid, True),
        lambda: backend.set_time_slice(uuid, 2),
        lambda: backend.set_mig_mode(0, True),
        lambda: backend.create_mig_device(0, "1g.10gb", 0),
        lambda: backend.destroy_mig_device(0, backend.gpu_instances(0)[0].gi_id),
    ]
    for done, change in enumerate(changes, start=1):
        change()
        assert (backend.changes.begun, backend.changes.ended) == (done, done)
    backend.read_inventory()
    backend.mig_profiles(0)
    assert backend.changes.begun == len(changes)  # readings are not changes
