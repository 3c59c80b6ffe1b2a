"""The golden corpus (tests/golden/pending_claims.yaml): for each pending claim, the Event the controller would post
leads with the sentence a platform engineer wants, carries the expected reason code, and says the rest too."""

from __future__ import annotations

from typing import Any

import pytest

from goldenfleet import scenarios, view_of
from gpudra.allocator import REASONS, Allocation
from gpudra.controller.explaining import explain, explanation
from gpudra.planning.migdemand import plan_pending

SCENARIOS = scenarios()


def test_the_corpus_covers_what_the_issue_lists() -> None:
    names = {s["name"] for s in SCENARIOS}
    assert len(names) == len(SCENARIOS) >= 20
    wanted = {"too-few-per-node", "every-match-in-use", "tainted", "wrong-model", "memory-below",
              "mig-profile-absent", "mig-profile-in-use", "match-attribute-across-requests",
              "first-available-exhausted", "counter-set-exhausted", "cel-runtime-error", "unknown-class",
              "admin-access-not-allowed", "incomplete-pool"}  # fmt: skip
    assert wanted <= names
    assert {s["reason"] for s in SCENARIOS} <= set(REASONS)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_event_leads_with_the_nearest_miss(scenario: dict[str, Any]) -> None:
    view, claim = view_of(scenario)
    outcome = explain(view, claim)
    assert not isinstance(outcome, Allocation), f"{scenario['name']} fits on {outcome.node}"
    plan = (
        None if scenario.get("planner") == "off" else plan_pending(view.allocator, [claim], "gpu.nvidia.com")
    )
    said = explanation(view, claim, outcome, plan)
    assert said.headline == scenario["first"]
    assert said.reason == scenario["reason"]
    text = said.text()
    assert text == said.headline or text.startswith(said.headline + ". ")
    assert len(text.encode()) <= 1024
    for expected in scenario.get("also") or ():
        assert expected in text
