"""A standalone gpudra process's heap and the garbage collector.

What a process builds while it starts lives as long as it does: the agent's modules, pydantic's validators, the GPU
catalog, its first readings and slices; the controller's informer caches after their first listing (every slice and
Node of the cluster: at 1,000 nodes about 300 MiB). CPython's full collections walk all of it: 15 to 30 ms each on a
dgx-h100's agent, during which the event loop answers no kubelet call; 0.3 to 1 s each in a controller of 1,000
nodes, several a minute while claims churn. Once started (the agent: its node's first slices published; the
controller: ready), the process collects once and freezes what is left (:func:`gc.freeze`): later full collections
walk only what was made since. Objects frozen are still freed when nothing refers to them (a deleted slice's), as
everything here is; only garbage in reference cycles would stay, and none of it is made at start.
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
