"""Deleting a ComputeDomain is bounded: failed passes are retried a fixed number of times, then the finalizer is
released anyway, and the summary names what was removed, what is left and which pods were not waited for."""

from __future__ import annotations

import pytest

from gpudra.controller.domainchildren import Cleanup, cleanup_verdict


@pytest.mark.parametrize(
    ("failed", "attempt", "attempts", "verdict"),
    [
        (False, 0, 5, "complete"),
        (False, 4, 5, "complete"),
        (True, 0, 5, "retry"),
        (True, 3, 5, "retry"),
        (True, 4, 5, "incomplete"),
        (True, 0, 1, "incomplete"),
    ],
)
def test_cleanup_is_retried_then_given_up(failed: bool, attempt: int, attempts: int, verdict: str) -> None:
    outcome = Cleanup(failed=["DaemonSet gpudra/x: 500 InternalError"] if failed else [])
    assert cleanup_verdict(outcome, attempt, attempts) == verdict


def test_summary_names_what_is_left_and_the_pods_not_waited_for() -> None:
    outcome = Cleanup(
        removed=["ResourceClaimTemplate team/train-channel", "label computedomain.gpudra.dev/u of node n1"],
        failed=["DaemonSet gpudra/computedomain-daemon-u: 500 InternalError"],
        holding_pods=["team/train-0"],
    )
    text = outcome.summary()
    assert text.startswith("removed 2 object(s) (ResourceClaimTemplate team/train-channel, label")
    assert "could not remove: DaemonSet gpudra/computedomain-daemon-u: 500 InternalError" in text
    assert "not waited for: pod(s) team/train-0 still hold a channel claim" in text
