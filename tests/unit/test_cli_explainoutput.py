"""`gpudra explain`'s default output (pure rendering): within 80 columns whatever the node names and words, the
nearest five nodes, and a pointer to `-o wide` for the rest."""

from __future__ import annotations

from rich.console import Console

from gpudra.allocator.diagnosis import NodesFailure
from gpudra.allocator.explain.explanation import Explanation, NodeLine
from gpudra.cli.explainoutput import PENDING, Answer, exit_status, short_report


def test_seven_nodes_show_the_nearest_five_in_80_columns_and_exit_1() -> None:
    nodes = tuple(
        NodeLine(f"a-rather-long-node-name-of-the-fleet-{i}", 5, "InsufficientDevices", 9, 8 - i, 8 - i,
                 f"has {8 - i} of 9, and some words that go on past the end of an 80-column terminal line")
        for i in range(7)
    )  # fmt: skip
    said = Explanation("InsufficientDevices", "needs 9 GPUs on one node; " + "x" * 150, (), nodes, (),
                       NodesFailure(7, [], {}))  # fmt: skip
    answer = Answer("default/nine", PENDING, explanation=said)
    console = Console(width=80, record=True)
    console.print(short_report(answer))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    assert lines[0] == "claim default/nine does not fit (InsufficientDevices)"
    assert sum("a-rather-long-node-name" in line for line in lines) == 5
    assert lines[-1].strip() == "2 more nodes: -o wide"
    assert exit_status([answer]) == 1
