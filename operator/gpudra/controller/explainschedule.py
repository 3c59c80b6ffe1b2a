"""When the controller explains a pending claim: as soon as its grace period is over (the explainer looks every
``TICK_SECONDS``), then again every pending interval, each claim on its own clock. Before, one round every grace
period explained every pending claim: a claim waited up to a grace period past its own, and at 1,000 nodes each
round re-explained hundreds of claims (docs/performance.md)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from gpudra.api.dra import ResourceClaim
from gpudra.controller.pending import age_seconds

TICK_SECONDS = 0.5
"""How often the explainer looks for claims whose time has come (at most; less with a shorter grace period)."""
SLACK = 1024
"""How many claims gone from the pending ones the record keeps before it is pruned."""


class ExplainSchedule:
    def __init__(self, grace_seconds: float, interval_seconds: float) -> None:
        self.grace = grace_seconds
        self.interval = interval_seconds
        self.tick = min(TICK_SECONDS, max(grace_seconds, 0.01))
        self._every = min(interval_seconds, max(grace_seconds, 0.1))
        self._explained: dict[str, float] = {}  # claim uid (a pod's implicit claim: its implicit uid) -> when
        self._last_round = -math.inf

    def past_grace(self, claims: Iterable[ResourceClaim], now: float) -> list[ResourceClaim]:
        return [c for c in claims if age_seconds(c.metadata, now) >= self.grace]

    def due(self, uid: str, now: float) -> bool:
        """Whether the claim (past its grace) is to be explained now: never yet, or a pending interval ago."""
        return now - self._explained.get(uid, -math.inf) >= self.interval

    def round_due(self, now: float, *, anything: bool) -> bool:
        """Whether a round runs now: with ``anything`` to explain, or as often as a round ran before the ticks
        (the MIG planner's apply policy steps its MigLayouts aside in a round)."""
        if anything or now - self._last_round >= self._every:
            self._last_round = now
            return True
        return False

    def explained(self, uids: Iterable[str], now: float, pending: set[str]) -> None:
        """These were explained at ``now``; ``pending``: every uid still pending (the rest may be forgotten)."""
        self._explained.update(dict.fromkeys(uids, now))
        if len(self._explained) > 2 * len(pending) + SLACK:
            self._explained = {u: t for u, t in self._explained.items() if u in pending}
