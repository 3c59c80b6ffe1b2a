"""A pending claim is explained as soon as its grace period is over, then again every pending interval, each on its
own clock: not up to a grace period late (one round every grace period, as before), and not re-explained every
grace period (at 1,000 nodes that was hundreds of claims a round)."""

from __future__ import annotations

from datetime import datetime

import pytest

from gpudra.api import timestamps
from gpudra.api.dra import ResourceClaim
from gpudra.api.timestamps import parse_rfc3339
from gpudra.controller import pending
from gpudra.controller.explainschedule import ExplainSchedule

CREATED = "2026-11-29T10:00:00Z"
T0 = parse_rfc3339(CREATED).timestamp()


def _claim(uid: str, created: str = CREATED) -> ResourceClaim:
    return ResourceClaim.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": uid, "namespace": "default", "uid": uid, "creationTimestamp": created},
            "spec": {"devices": {"requests": []}},
        }
    )


def test_a_claim_is_due_once_its_grace_is_over_and_looked_for_every_half_second() -> None:
    schedule = ExplainSchedule(grace_seconds=10, interval_seconds=30)
    claim = _claim("a")
    assert schedule.tick <= 0.5
    assert schedule.past_grace([claim], T0 + 9.9) == []
    assert schedule.past_grace([claim], T0 + 10) == [claim]
    assert schedule.due("a", T0 + 10)
    assert schedule.round_due(T0 + 10, anything=True)


def test_an_explained_claim_is_due_again_only_a_pending_interval_later() -> None:
    schedule = ExplainSchedule(grace_seconds=10, interval_seconds=30)
    schedule.explained(["a"], T0 + 10, pending={"a", "b"})
    assert not schedule.due("a", T0 + 20)  # one round every grace period re-explained it here
    assert not schedule.due("a", T0 + 39.9)
    assert schedule.due("a", T0 + 40)
    assert schedule.due("b", T0 + 20)  # another claim keeps its own clock


def test_with_nothing_to_explain_a_round_still_runs_every_grace_period() -> None:
    schedule = ExplainSchedule(grace_seconds=10, interval_seconds=30)
    assert schedule.round_due(T0, anything=False)
    assert not schedule.round_due(T0 + 9, anything=False)
    assert schedule.round_due(T0 + 9, anything=True)
    assert not schedule.round_due(T0 + 18, anything=False)
    assert schedule.round_due(T0 + 19, anything=False)


def test_the_record_of_claims_no_longer_pending_is_pruned() -> None:
    schedule = ExplainSchedule(grace_seconds=10, interval_seconds=30)
    schedule.explained([f"gone-{i}" for i in range(5000)], T0, pending=set())
    schedule.explained(["a"], T0, pending={"a"})
    assert schedule.due("gone-1", T0 + 1)  # forgotten: explained again should it come back
    assert not schedule.due("a", T0 + 1)


def test_the_explainers_ticks_parse_a_creation_stamp_once(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []

    def counting(stamp: str) -> datetime:
        parsed.append(stamp)
        return real(stamp)

    real = timestamps.parse_rfc3339
    monkeypatch.setattr(timestamps, "parse_rfc3339", counting)
    monkeypatch.setattr(pending, "parse_rfc3339", counting, raising=False)  # where it was called before
    created = "2026-11-29T10:07:00Z"  # a stamp no other test parses
    schedule = ExplainSchedule(grace_seconds=10, interval_seconds=30)
    claims = [
        _claim(f"c{i}", created) for i in range(50)
    ]  # created in the same second, as a burst's claims are
    for tick in range(4):
        assert schedule.past_grace(claims, T0 + 429 + tick * 0.5) == (claims if tick >= 2 else [])
    assert parsed == [created]
