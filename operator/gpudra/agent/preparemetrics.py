"""PrepareMetrics: what the kubelet plugin's calls tell Prometheus (requests by result, errors by reason,
durations, prepared devices). Without a registry (``metrics`` None) every method does nothing.

The series a call touches are looked up once, when the preparer is built: a labelled metric's ``labels()`` takes
its lock and builds its key on every call, three times a call before. The prepared devices are counted when
Prometheus scrapes (the gauge's function sums every checkpoint of the node's drivers: the GPU driver's and the
compute-domain driver's), not by each call going through every claim recorded (56 at once on a static MIG
dgx-h100)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal

from gpudra.agent.checkpoint import CheckpointStore
from gpudra.metrics import Metrics

Operation = Literal["prepare", "unprepare"]


def _completed_devices(store: CheckpointStore) -> Callable[[], int]:
    return lambda: sum(len(e.devices) for e in store.claims().values() if e.state == "PrepareCompleted")


class PrepareMetrics:
    def __init__(self, metrics: Metrics | None, *, node: str, store: CheckpointStore) -> None:
        self._metrics = metrics
        self._node = node
        if metrics is None:
            return
        self._seconds = {
            "prepare": metrics.prepare_seconds.labels(node),
            "unprepare": metrics.unprepare_seconds.labels(node),
        }
        self._requests = {
            (operation, result): family.labels(node, result)
            for operation, family in (
                ("prepare", metrics.prepare_requests),
                ("unprepare", metrics.unprepare_requests),
            )
            for result in ("ok", "failed")
        }
        counts = metrics.prepared_device_counts.setdefault(node, {})
        # a preparer built again for a driver (the agent's start-up, a restart in tests) replaces its own count
        counts[store.driver] = _completed_devices(store)
        metrics.prepared_devices.labels(node).set_function(lambda: sum(count() for count in counts.values()))

    @contextmanager
    def timed(self, operation: Operation) -> Iterator[None]:
        """Observe the duration of one claim's prepare or unprepare, however it ends."""
        started = time.monotonic()
        try:
            yield
        finally:
            if self._metrics is not None:
                self._seconds[operation].observe(time.monotonic() - started)

    def count(self, operation: Operation, result: Literal["ok", "failed"], reason: str = "") -> None:
        if self._metrics is None:
            return
        self._requests[operation, result].inc()
        if reason:
            self._metrics.prepare_errors.labels(self._node, operation, reason).inc()
