"""bench prepare's numbers through the real kubelet come from the kubelet's own log (kubelet 1.37.2 at
``--vmodule=dra_plugin=4``): each call is the time between its "Calling" line and the "Done calling" line of the
same claims, whatever other calls ran between them."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.kubeletprepare import call_durations

LOG = (Path(__file__).parents[1] / "fixtures" / "kubelet" / "dra-plugin-calls.log").read_text().splitlines()


def test_each_call_is_paired_with_its_own_answer_across_interleaved_calls() -> None:
    durations = call_durations(LOG, 2026)
    # two prepares in flight at once (claims a679... and ee58...), answered in the order they were asked
    assert durations["prepare"] == pytest.approx([0.541913 - 0.482164, 0.684181 - 0.537457])
    assert durations["unprepare"] == pytest.approx([0.055537 + 1 - 0.946668, 0.062639 + 1 - 0.979885])


def test_an_answer_without_its_call_and_other_lines_are_left_out() -> None:
    answers_only = [line for line in LOG if "Done calling" in line]
    assert call_durations([*answers_only, "I1129 11:18:53.482164   11788 kubelet.go:1] noise"], 2026) == {
        "prepare": [],
        "unprepare": [],
    }
