"""Each benchmark line that has a goal (issue #16) ends with it and MET or NOT MET, so a run reads as a checklist.

The goals are for the full-size runs on a 2-core machine; a ``--quick`` run (CI) measures smaller fleets, where the
verdict says what it compared against but proves nothing about the full size.
"""

from __future__ import annotations


def at_least(measured: float, goal: float, unit: str) -> str:
    """``goal >= 10,000 claims/s: MET``."""
    return f"goal >= {goal:,.0f} {unit}: {'MET' if measured >= goal else 'NOT MET'}"


def below(measured: float, goal: float, unit: str) -> str:
    """``goal < 50 ms: NOT MET``."""
    return f"goal < {goal:,.0f} {unit}: {'MET' if measured < goal else 'NOT MET'}"


def at_most(measured: float, goal: float, unit: str) -> str:
    """``goal <= 60 MiB: MET``."""
    return f"goal <= {goal:,.6g} {unit}: {'MET' if measured <= goal else 'NOT MET'}"
