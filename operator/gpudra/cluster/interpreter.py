"""What an embedded cluster changes in the Python interpreter it runs in, and gives back when it stops.

Both settings are process-wide while clusters are not: a process may run several (tests do), so the first cluster
to hold a setting applies it and the last to release it restores what was there before.

- **Garbage collector thresholds.** CPython collects its youngest generation every 700 new container objects. A
  cluster's requests, watch events and handler tasks live across several such collections, get promoted, and
  pull full collections over the whole heap (the slices, the caches, every node's agent) after them. At
  (10,000, 10, 10) they mostly die young: on the 64-tray ComputeDomain run in one process the collector's time fell
  from 3.1 and 3.3 s to 0.7 and 0.8 s, and the run from 13.1 and 14.5 s to 9.5 and 10.4 s (2026-11-27, measured
  with ``gc.callbacks``). Freezing the start-up heap (``gc.freeze``) on top gained nothing more.
- **Full collections while a large fleet starts** (``rare_full_collections``). A fleet's start builds the heap
  that stays: every node's agent, kubelet, objects and slices. Each full collection walks all of it, and CPython
  runs one each time that heap has grown by a quarter: at 1,000 simulated nodes they took 3.6 s of the main
  thread's 21 s of CPU, at 2,500 nodes (under cProfile) 21 s of 185 s (2026-11-29, timed with ``gc.callbacks``
  in the thread's CPU time). While the nodes start, a full collection comes only after 100 collections of the
  middle generation instead of 10 (at most one or two in a start of thousands of nodes); the young generations
  are collected as before.
- **Thread switch interval** (large fleets only, see ``gpudra.cluster.up.LARGE_FLEET_SWITCH_INTERVAL``).
- **Open files** (``ensure_open_files``): each simulated node's agent holds two (its plugin's and its
  registration's sockets; its hand-over locks are in memory), so a large fleet raises the process's soft limit
  toward its hard one, and a fleet the hard limit cannot hold is refused before it starts: at 5,000 nodes on a
  machine whose limit was 20,000, with four files a node then, 32 agents failed with "Too many open files" and the
  cluster waited for them until it gave up.
"""

from __future__ import annotations

import gc
import resource
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

from gpudra.errors import ConfigurationError

T = TypeVar("T")

CLUSTER_GC_THRESHOLDS = (10_000, 10, 10)
START_FULL_COLLECTION_EVERY = 100
"""While a large fleet starts: collections of the middle generation per full collection (CPython's is 10)."""


class SharedSetting(Generic[T]):
    """One process-wide setting that several holders may ask for at once."""

    def __init__(self, read: Callable[[], T], write: Callable[[T], None]) -> None:
        self._read, self._write = read, write
        self._holders = 0
        self._saved: T | None = None

    def hold(self, value: T) -> None:
        """Apply ``value`` (the first holder remembers what was there)."""
        if self._holders == 0:
            self._saved = self._read()
        self._holders += 1
        self._write(value)

    def release(self) -> None:
        """One holder is done; the last one restores the setting it found."""
        if self._holders == 0:
            return
        self._holders -= 1
        if self._holders == 0 and self._saved is not None:
            self._write(self._saved)
            self._saved = None


def _set_thresholds(values: tuple[int, ...]) -> None:
    gc.set_threshold(*values)


GC_THRESHOLDS: SharedSetting[tuple[int, ...]] = SharedSetting(gc.get_threshold, _set_thresholds)
SWITCH_INTERVAL: SharedSetting[float] = SharedSetting(sys.getswitchinterval, sys.setswitchinterval)


@contextmanager
def rare_full_collections() -> Iterator[None]:
    """Full collections ``START_FULL_COLLECTION_EVERY`` times rarer inside; the thresholds found are written back
    on the way out."""
    found = gc.get_threshold()
    gc.set_threshold(found[0], found[1], START_FULL_COLLECTION_EVERY)
    try:
        yield
    finally:
        gc.set_threshold(*found)


def ensure_open_files(needed: int, what: str) -> None:
    """Let this process open ``needed`` files: its soft limit raised up to its hard one if it is lower; a
    ConfigurationError saying so (``what`` needs them) when the hard limit is lower still."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or needed <= soft:
        return
    if hard != resource.RLIM_INFINITY and needed > hard:
        raise ConfigurationError(
            f"{what} needs about {needed:,} open files and this process may open {hard:,} (ulimit -Hn): raise "
            "the limit, or start fewer nodes"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
