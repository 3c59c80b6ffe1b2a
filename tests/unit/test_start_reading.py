"""The reading an agent takes when it takes up its node serves the first readers only while it is as good as a new
one: younger than the hardware poll, and no change of the GPUs by gpudra begun since (nor in progress at its
start)."""

from __future__ import annotations

import threading

import pytest

from gpudra.agent.startreading import StartReading
from gpudra.errors import HardwareError
from gpudra.hardware.gpus.inventory import NodeInventory
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.hardware.simulated.fake_nvml import FakeNvml


def h100_node() -> NvmlBackend:
    return NvmlBackend("n", nvml=FakeNvml.from_profile("dgx-h100", "n"))


async def test_the_start_reading_is_current_while_gpudra_changed_no_gpu() -> None:
    backend = h100_node()
    start = StartReading(backend, max_age_seconds=60)
    assert start.current() is None  # none taken yet
    await start.take()
    reading = start.current()
    assert reading is not None
    assert [g.minor for g in reading.inventory.gpus] == list(range(8))
    assert reading.inventory.gpus[0].nvlink_peers  # a reading to publish: the peers are in it
    assert start.current() is reading  # asked again: the same

    backend.set_compute_mode(reading.inventory.gpus[3].uuid, exclusive_process=True)
    assert start.current() is None  # a sharing setting changed a GPU since: read afresh


async def test_a_change_in_progress_when_it_began_makes_it_never_current() -> None:
    backend = h100_node()
    start = StartReading(backend, max_age_seconds=60)
    with backend.changes.one():  # e.g. a MIG instance being created on another thread
        await start.take()
    assert start.current() is None


async def test_it_is_not_current_once_a_poll_interval_old() -> None:
    start = StartReading(h100_node(), max_age_seconds=0)
    await start.take()
    assert start.current() is None


async def test_a_failed_reading_leaves_none_and_the_next_take_replaces_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = h100_node()
    start = StartReading(backend, max_age_seconds=60)
    await start.take()
    assert start.current() is not None
    calls = threading.Event()

    def failing(*, nvlink_peers: bool = True) -> NodeInventory:
        calls.set()
        raise HardwareError("NVML: the GPU is lost")

    monkeypatch.setattr(backend, "read_inventory", failing)
    await start.take()  # logged, not raised: each reader meets the error when it reads for itself
    assert calls.is_set()
    assert start.current() is None
