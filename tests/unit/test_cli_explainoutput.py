"""`gpudra explain`'s default output (pure rendering): within 80 columns whatever the node names and words, the
nearest five nodes, and a pointer to `-o wide` for the rest; an allocated claim its driver could not prepare says
why, once per distinct failure."""

from __future__ import annotations

from rich.console import Console

from gpudra.allocator.diagnosis import NodesFailure
from gpudra.allocator.explain.explanation import Explanation, NodeLine
from gpudra.api.dra import ResourceClaim
from gpudra.cli.explainoutput import (
    ALLOCATED,
    PENDING,
    Answer,
    answer_data,
    exit_status,
    short_report,
    wide_report,
)
from gpudra.planning.preparestatus import not_prepared


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


def _allocated(ready: dict[str, tuple[str, str, str]]) -> ResourceClaim:
    """A claim of gpu-0 and gpu-1 on node n1; ``ready``: device -> its Ready condition (status, reason, message)."""
    results = [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": d} for d in ("gpu-0", "gpu-1")
    ]
    devices = [
        {
            "driver": "gpu.nvidia.com",
            "pool": "n1",
            "device": device,
            "conditions": [{"type": "Ready", "status": status, "reason": reason, "message": message,
                            "lastTransitionTime": "2026-11-30T00:00:00Z"}],
        }
        for device, (status, reason, message) in ready.items()
    ]  # fmt: skip
    selector = {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
    }
    return ResourceClaim.model_validate(
        {
            "metadata": {"name": "two", "namespace": "default"},
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
            },
            "status": {
                "allocation": {"devices": {"results": results}, "nodeSelector": selector},
                "devices": devices,
            },
        }
    )


def _text(renderable: object) -> list[str]:
    console = Console(width=80, record=True)
    console.print(renderable)
    return [line.rstrip() for line in console.export_text().splitlines()]


def test_an_allocated_claim_its_driver_could_not_prepare_says_why_once_and_when_the_kubelet_tries_again() -> (
    None
):
    refused = ("False", "InvalidConfig", "invalid opaque config: MPS is disabled on this node")
    claim = _allocated({"gpu-0": refused, "gpu-1": refused})
    answer = Answer("default/two", ALLOCATED, allocation=claim.allocation, not_prepared=not_prepared(claim))

    lines = _text(short_report(answer))
    assert lines[0] == "claim default/two is allocated on node n1: gpu-0, gpu-1"
    said = " ".join(lines[1:])
    assert said.startswith(
        "not prepared (gpu-0, gpu-1): InvalidConfig: invalid opaque config: MPS is disabled on this node"
    ), lines
    assert said.endswith("at its next sync of the pod, a minute or more after it failed"), lines
    assert "not prepared (gpu-0, gpu-1): InvalidConfig" in " ".join(_text(wide_report(answer, ())))
    data = answer_data(answer)
    assert [(d["device"], d["reason"]) for d in data["notPrepared"]] == [
        ("gpu-0", "InvalidConfig"),
        ("gpu-1", "InvalidConfig"),
    ]
    assert exit_status([answer]) == 0  # allocated: nothing for the scheduler to do


def test_an_allocated_claim_prepared_or_not_tried_yet_says_nothing_more() -> None:
    for ready in ({"gpu-0": ("True", "Prepared", ""), "gpu-1": ("True", "Prepared", "")}, {}):
        claim = _allocated(ready)
        answer = Answer(
            "default/two", ALLOCATED, allocation=claim.allocation, not_prepared=not_prepared(claim)
        )
        assert _text(short_report(answer)) == ["claim default/two is allocated on node n1: gpu-0, gpu-1"]
        assert answer_data(answer)["notPrepared"] == []
