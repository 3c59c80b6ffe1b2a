"""matchAttribute and distinctAttribute over list attributes (DRAListTypeAttributes): Kubernetes compares lists
as sets and a scalar as a set of one; matchAttribute needs a value common to all the devices, distinctAttribute
devices that share none. kube-scheduler 1.36 does not (its allocator is never told the gate is on): a list joins
a constraint only as its first device, and nothing joins it under matchAttribute."""

from __future__ import annotations

from typing import Any

import pytest
from _allocator_kit import claim, distinct, gpu, make_allocator, match, picked, req, slice_

from gpudra.allocator import Allocation, Failure, render_text

PEERS = "gpu.nvidia.com/peers"


def allocate(peers: dict[str, Any], *requests: Any, constraint: Any, sets: bool = True) -> list[str] | str:
    devices = [gpu(name, peers=value) for name, value in peers.items()]
    outcome = make_allocator([slice_("n1", devices)], kube_minor=37 if sets else 36).allocate(
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


@pytest.mark.parametrize(
    ("peers", "requests", "constraint", "expect"),
    [
        pytest.param(
            {"gpu-0": ["x", "y"], "gpu-1": ["x", "y"], "gpu-2": "x", "gpu-3": "x"},
            [req("a", count=2)],
            match(PEERS),
            ["a:gpu-2", "a:gpu-3"],
            id="match-a-list-never-meets-another-device-but-equal-scalars-do",
        ),
        pytest.param(
            {"gpu-0": ["x", "y"], "gpu-1": ["x", "y"]},
            [req("a", count=2)],
            match(PEERS),
            "ConstraintConflict",
            id="match-two-equal-lists-fail",
        ),
        pytest.param(
            {"gpu-0": ["x"], "gpu-1": "y"},
            [req("a", count=1)],
            match(PEERS),
            ["a:gpu-0"],
            id="match-a-list-alone-is-its-own-set",
        ),
        pytest.param(
            {"gpu-0": "x", "gpu-1": ["x"], "gpu-2": ["y"], "gpu-3": "x"},
            [req("a", count=2)],
            distinct(PEERS),
            ["a:gpu-1", "a:gpu-3"],
            id="distinct-a-list-only-first-and-a-scalar-never-compared-with-it",
        ),
        pytest.param(
            {"gpu-0": ["x"], "gpu-1": ["y"]},
            [req("a", count=2)],
            distinct(PEERS),
            "ConstraintConflict",
            id="distinct-two-disjoint-lists-fail",
        ),
    ],
)
def test_kube_scheduler_1_36_compares_scalars_only(
    peers: dict[str, Any], requests: list[Any], constraint: Any, expect: Any
) -> None:
    assert allocate(peers, *requests, constraint=constraint, sets=False) == expect


def test_on_1_36_the_explanation_says_a_list_matches_no_other_device() -> None:
    island = [gpu(name, peers=["u2", "u3"]) for name in ("gpu-2", "gpu-3")]
    outcome = make_allocator([slice_("n1", island)], kube_minor=36).allocate(
        "n1", [claim("c", req("a", count=2), constraints=[match(PEERS)])]
    )
    assert isinstance(outcome, Failure) and outcome.reason == "ConstraintConflict"
    text = render_text(outcome)
    assert (
        f"request a needs 2 NVIDIA H100 80GB HBM3 sharing one {PEERS}; the most sharing one on any node is 1"
        in text
    )
    assert "Kubernetes 1.36 compares a list attribute with no other device's value" in text
