"""The agent process's heap and the garbage collector.

Everything the agent builds while it starts (its modules, pydantic's validators, the GPU catalog, the first
readings and slices) lives as long as the process. CPython's full collections walk all of it: 15 to 30 ms each
on a dgx-h100's agent, during which the event loop answers no kubelet call (one landed in the last round of
`bench prepare`'s whole-GPU prepares and made its p99). Once the node's first slices are published, the agent
collects once and freezes what is left (:func:`gc.freeze`): later full collections walk only what was made
since, well under a millisecond.
"""

from __future__ import annotations

import asyncio
import gc

from gpudra.telemetry import get_logger

log = get_logger(__name__)


async def freeze_when_started(started: asyncio.Event) -> None:
    """After ``started``: collect the start-up garbage once, then leave the rest out of every later collection."""
    await started.wait()
    gc.collect()
    gc.freeze()
    log.debug("start-up heap frozen for the collector", objects=gc.get_freeze_count())
