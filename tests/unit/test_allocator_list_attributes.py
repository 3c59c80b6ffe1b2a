"""matchAttribute and distinctAttribute over list attributes (DRAListTypeAttributes): Kubernetes compares lists
as sets and a scalar as a set of one; matchAttribute needs a value common to all the devices, distinctAttribute
devices that share none."""

from __future__ import annotations

from typing import Any

import pytest
from _allocator_kit import claim, distinct, gpu, make_allocator, match, picked, req, slice_

from gpudra.allocator import Allocation, Failure

PEERS = "gpu.nvidia.com/peers"


def allocate(peers: dict[str, Any], *requests: Any, constraint: Any) -> list[str] | str:
    devices = [gpu(name, peers=value) for name, value in peers.items()]
    outcome = make_allocator([slice_("n1", devices)]).allocate(
        "n1", [claim("c", *requests, constraints=[constraint])]
    )
    if isinstance(outcome, Failure):
        return outcome.reason
    assert isinstance(outcome, Allocation)
    return [f"{r.request}:{r.device}" for r in picked(outcome)]


@pytest.mark.parametrize(
    ("peers", "requests", "constraint", "expect"),
    [
        pytest.param(
            {"gpu-0": ["x", "y"], "gpu-1": ["y", "z"], "gpu-2": ["z"], "gpu-3": ["y"]},
            [req("a", count=3)],
            match(PEERS),
            ["a:gpu-0", "a:gpu-1", "a:gpu-3"],
            id="match-needs-a-value-common-to-all-not-pairwise",
        ),
        pytest.param(
            {"gpu-0": ["x", "y"], "gpu-1": ["y"], "gpu-2": ["x"], "gpu-3": ["x"]},
            [req("a"), req("b", count=2)],
            match(PEERS),
            ["a:gpu-0", "b:gpu-2", "b:gpu-3"],
            id="match-backtracking-widens-the-common-values-again",
        ),
        pytest.param(
            {"gpu-0": ["x"], "gpu-1": "x", "gpu-2": ["y"]},
            [req("a", count=2)],
            match(PEERS),
            ["a:gpu-0", "a:gpu-1"],
            id="match-a-scalar-is-a-list-of-one",
        ),
        pytest.param(
            {"gpu-0": [1, 0], "gpu-1": ["1"], "gpu-2": [0]},
            [req("a", count=2)],
            match(PEERS),
            ["a:gpu-0", "a:gpu-2"],
            id="match-values-of-another-kind-never-meet",
        ),
        pytest.param(
            {"gpu-0": ["x", "y"], "gpu-1": ["y"], "gpu-2": ["z"]},
            [req("a", count=3)],
            match(PEERS),
            "ConstraintConflict",
            id="match-impossible",
        ),
        pytest.param(
            {"gpu-0": ["x", "y"], "gpu-1": ["y", "z"], "gpu-2": ["z", "w"], "gpu-3": ["v"]},
            [req("a", count=2)],
            distinct(PEERS),
            ["a:gpu-0", "a:gpu-2"],
            id="distinct-needs-disjoint-lists",
        ),
        pytest.param(
            {"gpu-0": ["x", "x"], "gpu-1": "x", "gpu-2": "y"},
            [req("a", count=2)],
            distinct(PEERS),
            ["a:gpu-0", "a:gpu-2"],
            id="distinct-scalar-against-list",
        ),
        pytest.param(
            {"gpu-0": ["x", "y"], "gpu-1": ["y", "z"], "gpu-2": ["z", "x"]},
            [req("a", count=2)],
            distinct(PEERS),
            "ConstraintConflict",
            id="distinct-impossible",
        ),
    ],
)
def test_list_attribute_constraints(
    peers: dict[str, Any], requests: list[Any], constraint: Any, expect: Any
) -> None:
    assert allocate(peers, *requests, constraint=constraint) == expect
