"""Two gaps in kopf's (1.45) start and stop that a controller started and stopped quickly meets (`gpudra up --once`,
tests, a rolling restart), and what fills them. Both reach into kopf's internals, which have no public form.

- **Ready before discovery.** kopf raises its ready flag before it has discovered the API's resources. A stop
  during the discovery leaves the discovery's requests retrying against closed connections ("Request attempt
  #1/9 failed ... Connector is closed") for the five seconds kopf grants stray tasks. :func:`raise_once_discovered`
  raises the flag once the discovery is done.
- **Stranded watch streams.** kopf cancels each watcher when it stops. A watcher cancelled while it hands a new
  object to a worker, not while it waits on its stream (a stop during a burst of new objects: the initial
  listing, a large fleet), leaves its stream's async generator suspended, and with it a task waiting for the
  operator's pause. kopf waits five seconds for that task, and the generator is closed only as the event loop
  ends, where it fails: "generator didn't stop after athrow()". :func:`close_stranded_streams` closes them once
  kopf's watchers are gone (a cleanup activity runs then).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import types
from typing import Any

import kopf
from kopf._cogs.clients.watching import infinite_watch
from kopf._cogs.structs.references import Insights

__all__ = ["Insights", "close_stranded_streams", "raise_once_discovered"]

_STREAM_CODE = infinite_watch.__code__
_PAUSE_WAITER = "pause-waiter for "  # the name kopf gives the task each watch stream keeps while it is open


async def raise_once_discovered(insights: Insights, ready: asyncio.Event | threading.Event) -> None:
    """Set ``ready`` once the kopf run given ``insights`` has discovered the API's resources."""
    await insights.ready_resources.wait()
    ready.set()


def _stranded_streams(settings: kopf.OperatorSettings) -> list[types.AsyncGeneratorType[Any, Any]]:
    """The watch streams of the kopf run with these ``settings`` that are suspended between two events and not
    yet closed (another run in the process, another thread's, has its own settings and is left alone)."""
    return [
        stream
        for stream in gc.get_objects()
        if isinstance(stream, types.AsyncGeneratorType)
        and stream.ag_code is _STREAM_CODE
        and stream.ag_frame is not None
        and stream.ag_await is None
        and stream.ag_frame.f_locals.get("settings") is settings
    ]


async def close_stranded_streams(settings: kopf.OperatorSettings) -> int:
    """Close the run's stranded watch streams (call it once its watchers are gone, in the run's event loop); how
    many there were. The search visits every object of the process (0.8 s beside a 1,000-node embedded fleet), so
    it runs only when a stream's pause waiter is still pending, which only a stranded stream leaves."""
    if not any(task.get_name().startswith(_PAUSE_WAITER) for task in asyncio.all_tasks()):
        return 0
    streams = _stranded_streams(settings)
    for stream in streams:
        with contextlib.suppress(Exception):
            await stream.aclose()
    return len(streams)
