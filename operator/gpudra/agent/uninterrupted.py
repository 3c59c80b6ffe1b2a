"""Steps a cancellation must not cut in half: a hardware change running in a worker thread, and the rollback of a
prepare.

gRPC cancels the agent's handler when the kubelet gives up on a call (its deadline, or the pod deleted meanwhile).
A cancelled ``asyncio.to_thread`` stops waiting, not the thread: the NVML call goes on and creates its MIG instance
after the prepare has moved on, released the claim's lock and let the kubelet's unprepare find nothing to destroy.
So these steps are awaited to their end first, and the cancellation is raised after them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def to_the_end(step: Awaitable[T]) -> T:
    """Await ``step`` until it has ended, even when the caller is cancelled meanwhile; then raise that cancellation
    (after the step's own outcome, which is lost only to the cancellation)."""
    task = asyncio.ensure_future(step)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done():
                raise  # the step itself was cancelled
            cancelled = True
        except BaseException:
            if cancelled:
                raise asyncio.CancelledError from None
            raise
    if cancelled:
        raise asyncio.CancelledError
    return result
