"""kopf's watch streams: a stop that waits for kopf's discovery, and the streams closed before the loop ends.

kopf is stopped by cancelling its task (kopf's own stop flag leaves handler workers retrying against closed
connections). Two moments of a cancel go wrong, and both are met by a controller stopped soon after its start or
amid a burst of new objects (``gpudra up --once``, tests, a rolling restart):

- **During kopf's discovery** of the API's resources, which runs after kopf says it is ready: the discovery's
  requests go on retrying against closed connections ("Request attempt #1/9 failed ... Connector is closed").
  A stop therefore waits, a few seconds at most, until kopf has opened a watch stream, which it does once its
  discovery is done.
- **While a watcher hands an object to a worker**, not while it waits on its stream: the stream's async generator
  is left suspended, and the event loop's shutdown closes every generator left at once, the inner ones before the
  outer that still holds them: "generator didn't stop after athrow()", logged as an error. The suspended ones are
  closed here first, outer first.

:class:`KopfStreams` sees each of kopf's async generators as the loop first iterates it, through Python's asyncgen
hooks (beside the loop's own). It imports nothing of kopf's internals: a generator is kopf's when its code is in
kopf's package, and a watch stream's when that code is kopf's ``watching`` module.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import sys
import types
import weakref
from pathlib import Path
from typing import Any

import kopf

_KOPF = str(Path(inspect.getfile(kopf)).parent)
_WATCHING = "watching.py"
AsyncGen = types.AsyncGeneratorType[Any, Any]


class KopfStreams:
    """Install in the controller's thread before kopf starts; after kopf's task is done, close; then uninstall."""

    def __init__(self) -> None:
        self._order = itertools.count()
        self._generators: weakref.WeakKeyDictionary[AsyncGen, int] = weakref.WeakKeyDictionary()
        self._hooks = sys.get_asyncgen_hooks()
        self.watching = asyncio.Event()
        """Set once kopf opened its first watch stream (its discovery of the API's resources is done)."""

    def install(self) -> None:
        firstiter, finalizer = self._hooks = sys.get_asyncgen_hooks()

        def record(generator: Any) -> None:
            filename = generator.ag_code.co_filename
            if filename.startswith(_KOPF):
                self._generators[generator] = next(self._order)
                if filename.endswith(_WATCHING):
                    self.watching.set()
            if firstiter is not None:
                firstiter(generator)

        sys.set_asyncgen_hooks(firstiter=record, finalizer=finalizer)

    def uninstall(self) -> None:
        firstiter, finalizer = self._hooks
        sys.set_asyncgen_hooks(firstiter=firstiter, finalizer=finalizer)

    async def discovered(self, timeout: float) -> None:
        """Until kopf opened a watch stream, ``timeout`` seconds at most (kopf may have nothing to watch)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.watching.wait(), timeout)

    async def close(self) -> int:
        """Close kopf's generators left suspended, in the order they started (outer first); how many."""
        left = sorted(
            (order, generator)
            for generator, order in list(self._generators.items())
            if generator.ag_frame is not None and not generator.ag_running
        )
        for _, generator in left:
            with contextlib.suppress(Exception):
                await generator.aclose()
        return len(left)
