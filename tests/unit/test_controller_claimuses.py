"""A claim change is handed to each of the controller's uses of it (allocation metrics, pending claims, waiting
pods, ComputeDomains, config checks) in turn: a bug in one use is logged with the use and the claim, and the next
use still gets the change; a cancellation is not swallowed."""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from gpudra.controller.kopfapp import _Logged


def test_a_failing_use_of_a_claim_change_is_logged_and_the_next_use_still_runs() -> None:
    ran: list[str] = []
    with capture_logs() as logs:
        with _Logged("claim usage", "u1"):
            raise KeyError("a bug")
        with _Logged("claim config checks", "u1"):
            ran.append("config checks")
    assert ran == ["config checks"]
    assert [(e["event"], e["part"], e["uid"], e["log_level"]) for e in logs] == [
        ("handling a claim change failed", "claim usage", "u1", "error")
    ]
    assert isinstance(logs[0]["exc_info"], KeyError)


def test_a_cancelled_use_is_not_swallowed() -> None:
    with pytest.raises(asyncio.CancelledError), _Logged("claim config checks", "u1"):
        raise asyncio.CancelledError
