"""PrepareMetrics: what the kubelet plugin's calls tell Prometheus (requests by result, errors by reason,
durations, prepared devices). Without a registry (``metrics`` None) every method does nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from gpudra.agent.checkpoint import CheckpointStore
from gpudra.metrics import Metrics

Operation = Literal["prepare", "unprepare"]


class PrepareMetrics:
    def __init__(self, metrics: Metrics | None, *, node: str) -> None:
        self._metrics = metrics
        self._node = node

    @contextmanager
    def timed(self, operation: Operation) -> Iterator[None]:
        """Observe the duration of one claim's prepare or unprepare, however it ends."""
        started = time.monotonic()
        try:
            yield
        finally:
            if self._metrics is not None:
                histogram = (
                    self._metrics.prepare_seconds
                    if operation == "prepare"
                    else self._metrics.unprepare_seconds
                )
                histogram.labels(self._node).observe(time.monotonic() - started)

    def count(self, operation: Operation, result: str, reason: str = "") -> None:
        if self._metrics is None:
            return
        counter = (
            self._metrics.prepare_requests if operation == "prepare" else self._metrics.unprepare_requests
        )
        counter.labels(self._node, result).inc()
        if reason:
            self._metrics.prepare_errors.labels(self._node, operation, reason).inc()

    def prepared_devices(self, store: CheckpointStore) -> None:
        """Set the gauge of devices in completed prepares."""
        if self._metrics is None:
            return
        count = sum(len(e.devices) for e in store.claims().values() if e.state == "PrepareCompleted")
        self._metrics.prepared_devices.labels(self._node).set(count)
