"""Pending claims explained for the web view as ``gpudra explain`` does (the allocator over every published slice,
node by node, plus the MIG planner's repartition), in a worker process and at most every ``interval`` seconds while
the cluster keeps changing: that is the costly part on a large fleet."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gpudra.allocator import DEFAULT_KUBE_MINOR, Allocation, claim_key
from gpudra.api.core import Pod
from gpudra.api.dra import ResourceClaim
from gpudra.controller.explaining import (
    ClusterView,
    explain,
    explanation,
    no_node_left,
    pod_view,
    view_from_wire,
)
from gpudra.errors import GpudraError
from gpudra.mig import DemandPlan
from gpudra.planning.migdemand import plan_pending
from gpudra.planning.podclaims import waiting_pod_of
from gpudra.planning.podnodes import filters_key, filters_of
from gpudra.planning.podscheduling import Unschedulable, scheduling_gates, unschedulable
from gpudra.planning.workloads import PendingCard, nowhere_card, pending_card
from gpudra.telemetry import get_logger

log = get_logger(__name__)

Body = dict[str, Any]
EXPLAINED_FROM = ("nodes", "slices", "claims", "classes", "namespaces", "pods")
"""The kinds an explanation reads (keys of the web view's watched objects; the pods are those not bound yet)."""


def explain_pending(
    objects: Mapping[str, list[Body]], pending: list[Body], driver: str, limit: int, kube_minor: int
) -> dict[str, PendingCard]:
    """Pure (and slow on large fleets): claim uid -> its card, for the oldest ``limit`` pending claims, explained
    as ``gpudra explain`` does (the MIG planner serving them together), each over the nodes its waiting pod may go
    to, following the allocator of Kubernetes 1.``kube_minor``. Runs in the worker process, which is sent wire
    objects."""
    view = view_from_wire(
        objects["slices"],
        objects["classes"],
        objects["claims"],
        objects["namespaces"],
        objects["nodes"],
        kube_minor=kube_minor,
    )
    claims = [ResourceClaim.model_validate(c) for c in pending]
    oldest = sorted(claims, key=lambda c: (c.metadata.creation_timestamp or "", c.metadata.namespaced_name))
    oldest = oldest[:limit]
    pods = {p.metadata.uid: p for p in (Pod.model_validate(b) for b in objects["pods"])}
    raw_pods = {str(b["metadata"].get("uid")): b for b in objects["pods"]}
    views: list[tuple[ClusterView, dict[str, str]]] = []
    said: list[tuple[tuple[str, ...], Unschedulable | None]] = []  # the pod's gates, kube-scheduler's word
    by_filters: dict[str, tuple[ClusterView, dict[str, str]]] = {}  # pods alike (a Job's) share their nodes
    for claim in oldest:
        pod = waiting_pod_of(claim.metadata, pods.values())
        said.append((scheduling_gates(pod), unschedulable(pod)) if pod else ((), None))
        if pod is None:
            views.append((view, {}))
            continue
        filters = filters_of(raw_pods[pod.metadata.uid or ""])
        key = filters_key(filters)
        if key not in by_filters:
            by_filters[key] = pod_view(view, filters, objects["nodes"])
        views.append(by_filters[key])
    kept_off = {claim_key(c): list(kept) for c, (_, kept) in zip(oldest, views, strict=True) if kept}
    try:
        plan: DemandPlan | None = plan_pending(view.allocator, oldest, driver, view.mig_models, kept_off)
    except GpudraError as exc:
        log.warning("the MIG planner failed for the web view", error=str(exc))
        plan = None
    cards: dict[str, PendingCard] = {}
    for claim, (seen, kept), (gates, stuck) in zip(oldest, views, said, strict=True):
        if no_node_left(view, kept):
            cards[claim.metadata.uid or ""] = nowhere_card(claim, kept)
            continue
        outcome = explain(seen, claim)
        worded = outcome.node if isinstance(outcome, Allocation) else explanation(seen, claim, outcome, plan)
        cards[claim.metadata.uid or ""] = pending_card(claim, worded, kept, gates, stuck)
    return cards


@contextlib.contextmanager
def _interrupts_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread meanwhile: a process started here keeps it blocked through its exec, from its
    first instruction. A Ctrl-C reaches the whole foreground process group and the controller stops the worker
    itself; the worker printed a KeyboardInterrupt traceback at every Ctrl-C of gpudra up (and an initializer
    that ignores SIGINT comes too late: the signal can land while the worker still imports)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@dataclass
class PendingExplainer:
    driver: str
    wake: Callable[[], None]
    """Called when an explanation ended (its cards are in ``cards``) or the interval has passed."""
    interval: float = 1.0
    limit: int = 50
    kube_minor: int = DEFAULT_KUBE_MINOR
    """The API server's Kubernetes minor version, whose allocator the explanations follow."""
    stale: bool = True
    """The inputs changed since the last explanation started."""
    cards: dict[str, PendingCard] = field(default_factory=dict)
    """claim uid -> its card, from the last explanation that ended."""
    _task: asyncio.Future[dict[str, PendingCard]] | None = None
    _pool: ProcessPoolExecutor | None = None
    _next: float = 0.0

    def explain_if_due(self, objects: Callable[[], dict[str, list[Body]]], pending: list[Body]) -> None:
        """Start explaining ``pending`` over ``objects()`` in the worker process, unless one runs or the interval
        has not passed (then wake the loop again when it has)."""
        if not pending:
            self.cards, self.stale = {}, False
            return
        now = time.monotonic()
        if self._task is not None:
            return  # its end wakes the loop, and the inputs are still stale
        if now < self._next:
            asyncio.get_running_loop().call_later(self._next - now, self.wake)
            return
        self.stale = False
        if self._pool is None:
            # A process of its own: explaining is seconds of pure-Python CPU on a large fleet, and in a thread it
            # would hold the GIL against the loop that serves the page and the updates.
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        with _interrupts_blocked():  # the worker, started by the first submit, inherits the blocked SIGINT
            submitted = self._pool.submit(
                explain_pending, objects(), pending, self.driver, self.limit, self.kube_minor
            )
        task: asyncio.Future[dict[str, PendingCard]] = asyncio.wrap_future(submitted)
        self._task = task

        def done(t: asyncio.Future[dict[str, PendingCard]]) -> None:
            self._task = None
            self._next = time.monotonic() + max(self.interval, 2 * (time.monotonic() - now))
            if not t.cancelled() and t.exception() is None:
                self.cards = t.result()
            elif not t.cancelled():
                log.warning("explaining pending claims for the web view failed", error=repr(t.exception()))
            self.wake()

        task.add_done_callback(done)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
