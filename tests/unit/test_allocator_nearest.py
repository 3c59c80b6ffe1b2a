"""Ranking nodes by how near they come to a pending claim, and the words for it (pure, with the kit's fake CEL)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from _allocator_kit import (
    CLASSES,
    claim,
    counter_set,
    device_class,
    distinct,
    gpu,
    gpus,
    make_allocator,
    mig,
    req,
    slice_,
)

from gpudra.allocator import (
    Allocation,
    Allocator,
    DeviceId,
    Explanation,
    NodeInfo,
    NodesFailure,
    explain_outcome,
)
from gpudra.allocator.explain.explanation import Repartition
from gpudra.allocator.explain.nearest import CLOSE, FAR, SHORT, WAITS, examine, rank
from gpudra.api.dra import DeviceTaint, ResourceClaim, ResourceSlice

H100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'
NVLINK = 'device.attributes["gpu.nvidia.com"].nvlink == true'
L4 = "NVIDIA L4"


def busy(allocator: Allocator, node: str, *devices: str) -> dict[DeviceId, str]:
    for device in devices:
        allocator.snapshot.allocate_device(DeviceId("gpu.nvidia.com", node, device))
    return {}


def examined(
    slices: list[ResourceSlice], claims: Sequence[ResourceClaim], in_use: dict[str, list[str]] | None = None
) -> tuple[NodesFailure, Allocator]:
    allocator = make_allocator(slices)
    for node, devices in (in_use or {}).items():
        busy(allocator, node, *devices)
    nodes = [NodeInfo(n) for n in allocator.snapshot.node_names()]
    outcome = allocator.find_node(claims, nodes)
    assert isinstance(outcome, NodesFailure)
    return examine(outcome, claims, nodes, allocator), allocator


def explained(
    slices: list[ResourceSlice],
    claims: Sequence[ResourceClaim],
    in_use: dict[str, list[str]] | None = None,
    holders: dict[DeviceId, str] | None = None,
) -> Explanation:
    outcome, allocator = examined(slices, claims, in_use)
    return explain_outcome(outcome, snapshot=allocator.snapshot, holders=holders)


def test_nodes_rank_by_tier_then_by_how_little_they_miss() -> None:
    slices = [
        gpus("a-far", 2, L4),  # the class keeps them, the request does not: close
        slice_("b-mig", [gpu("mig-0", type="mig")]),  # the class leaves it out: far
        gpus("c-two", 2),  # 2 of 4: short by 2
        gpus("d-three", 3),  # 3 of 4: short by 1
        gpus("e-busy", 4),  # 4, one in use: waits
    ]
    outcome, _ = examined(slices, [claim("c", req("gpu", "gpu.nvidia.com", H100, count=4))],
                          {"e-busy": ["gpu-0"]})  # fmt: skip
    ranked = rank(outcome.failures)
    assert [(m.node, m.nearness.tier) for m in ranked] == [
        ("e-busy", WAITS), ("d-three", SHORT), ("c-two", SHORT), ("a-far", CLOSE), ("b-mig", FAR),
    ]  # fmt: skip
    assert [(m.nearness.now, m.nearness.later) for m in ranked[:3]] == [(3, 4), (3, 3), (2, 2)]


def test_waiting_nodes_rank_by_devices_to_free_then_claims_to_end() -> None:
    slices = [gpus("n1", 4), gpus("n2", 4), gpus("n3", 4)]
    holders = {
        DeviceId("gpu.nvidia.com", "n1", "gpu-0"): "default/a",
        DeviceId("gpu.nvidia.com", "n1", "gpu-1"): "default/a",
        DeviceId("gpu.nvidia.com", "n2", "gpu-0"): "default/b",
        DeviceId("gpu.nvidia.com", "n2", "gpu-1"): "default/c",
        DeviceId("gpu.nvidia.com", "n3", "gpu-0"): "default/d",
        DeviceId("gpu.nvidia.com", "n3", "gpu-1"): "default/d",
        DeviceId("gpu.nvidia.com", "n3", "gpu-2"): "default/d",
    }
    in_use = {"n1": ["gpu-0", "gpu-1"], "n2": ["gpu-0", "gpu-1"], "n3": ["gpu-0", "gpu-1", "gpu-2"]}
    outcome, _ = examined(slices, [claim("c", req(count=4))], in_use)
    assert [m.node for m in rank(outcome.failures, holders)] == ["n1", "n2", "n3"]
    said = explain_outcome(outcome, holders=holders)
    assert said.headline == (
        "needs 4 NVIDIA H100 80GB HBM3 on one node; n1 has 4 but 2 are in use by default/a"
    )
    assert said.sentences[:2] == (
        "n2 has 4 but 2 are in use by default/b and default/c",
        "n3 has 4 but 3 are in use by default/d",
    )


def test_closest_devices_follow_the_node_ranking_least_missing_first() -> None:
    """Only devices that miss something, each saying what (n2's free gpu-0 and gpu-2 are no news)."""
    slices = [gpus("n1", 2, L4), gpus("n2", 3)]
    said = explained(slices, [claim("c", req("gpu", "gpu.nvidia.com", H100, count=3))], {"n2": ["gpu-1"]},
                     {DeviceId("gpu.nvidia.com", "n2", "gpu-1"): "ml/train"})  # fmt: skip
    assert [(c.node, c.device, c.miss) for c in said.closest] == [
        ("n2", "gpu-1", "in use by ml/train"),
        ("n1", "gpu-0", f"fails '{H100}'"),
        ("n1", "gpu-1", f"fails '{H100}'"),
    ]
    assert [n.node for n in said.nodes] == ["n2", "n1"]


def test_far_nodes_are_one_clause_whatever_their_number() -> None:
    slices = [gpus("h100", 1)] + [gpus(f"l4-{i}", 2, L4) for i in range(7)]
    said = explained(slices, [claim("c", req("gpu", "gpu.nvidia.com", H100, count=2))])
    assert said.headline == "needs 2 NVIDIA H100 80GB HBM3 on one node; the most on any node is 1 (h100)"
    assert said.sentences == (
        "7 other nodes have no NVIDIA H100 80GB HBM3 (NVIDIA L4 on l4-0, l4-1, l4-2 and 4 more)",
    )


def test_closest_devices_failing_several_selectors() -> None:
    said = explained([gpus("n1", 2, L4)], [claim("c", req("gpu", "gpu.nvidia.com", H100, NVLINK))])
    assert (
        said.headline
        == f"no GPU matches request gpu: the closest 2 NVIDIA L4 fail 2 of its selectors, e.g. '{H100}'"
    )
    assert said.reason == "NoMatchingDevice"


def test_distinct_attribute_shortfall() -> None:
    slices = [slice_("n1", [gpu(f"gpu-{i}", numa=i // 2) for i in range(4)])]
    c = claim("c", req("gpu", count=3), constraints=[distinct("gpu.nvidia.com/numa")])
    said = explained(slices, [c])
    assert said.headline == (
        "request gpu needs 3 NVIDIA H100 80GB HBM3 with different gpu.nvidia.com/numa; the most different on any "
        "node is 2 (n1)"
    )
    assert said.reason == "ConstraintConflict"


def test_a_runtime_error_in_a_class_selector_names_the_class() -> None:
    allocator = make_allocator([gpus("n1", 1)], [*CLASSES, device_class("broken", "boom")])
    outcome = allocator.allocate("n1", [claim("c", req("gpu", "broken"))])
    assert not isinstance(outcome, Allocation)
    said = explain_outcome(outcome)
    assert said.headline.startswith("the selector of class broken fails on n1/gpu-0: ")
    assert said.reason == "InvalidSelector"


def test_tainted_devices_list_their_untolerated_taints() -> None:
    taint = DeviceTaint(key="gpu.nvidia.com/xid", value="48", effect="NoExecute")
    slices = [slice_("n1", [gpu("gpu-0", taints=[taint]), gpu("gpu-1", taints=[taint]), gpu("gpu-2")])]
    said = explained(slices, [claim("c", req(count=3))])
    assert said.headline == (
        "needs 3 NVIDIA H100 80GB HBM3 on one node; n1 has 3 but 2 are tainted gpu.nvidia.com/xid=48:NoExecute, "
        "which the request does not tolerate"
    )
    assert said.reason == "Tainted"


def test_claims_holding_devices_in_use_and_overlapping_ones_are_named_once() -> None:
    devices = [mig(f"mig-{i}", "gpu-0", "1g.5gb", memory_slice_0=1 if i < 2 else 0, memory_slice_1=1 if i >= 2 else 0)
               for i in range(4)]  # fmt: skip
    slices = [
        slice_("n1", devices, counters=[counter_set("gpu-0-counter-set", memory_slice_0=1, memory_slice_1=1)])
    ]
    holders = {DeviceId("gpu.nvidia.com", "n1", d): "default/x" for d in ("mig-0", "mig-2")}
    said = explained(
        slices, [claim("c", req("mig", "mig.nvidia.com", count=4))], {"n1": ["mig-0", "mig-2"]}, holders
    )
    assert said.headline == (
        "needs 4 1g.5gb MIG devices on one node; n1 has 4 but 2 are in use and 2 overlap MIG devices in use, all "
        "held by default/x"
    )
    assert said.reason == "DevicesInUse"


def test_class_not_found_lists_the_classes_or_says_there_are_none() -> None:
    allocator = make_allocator([gpus("n1", 1)], [])
    outcome = allocator.find_node([claim("c", req("gpu", "gpu.nvidia.com"))])
    assert not isinstance(outcome, Allocation)
    assert explain_outcome(outcome).headline == (
        "request gpu names DeviceClass gpu.nvidia.com, which does not exist; the cluster has no DeviceClass"
    )
    outcome = make_allocator([gpus("n1", 1)]).find_node([claim("c", req("gpu", "gpu"))])
    assert not isinstance(outcome, Allocation)
    words = explain_outcome(outcome, classes=["gpu.nvidia.com", "mig.nvidia.com"]).headline
    assert (
        words
        == "request gpu names DeviceClass gpu, which does not exist; the cluster has gpu.nvidia.com, mig.nvidia.com"
    )


@pytest.mark.parametrize(
    ("profiles", "steps", "note", "sentence"),
    [
        ((("1g.10gb", 2), ("3g.40gb", 1)), ("GPU 1: create 2x 1g.10gb, 3g.40gb",), "",
         "would fit on n1 if its MIG layout had 2x 1g.10gb and a 3g.40gb free (the MIG planner can do this: GPU 1: "
         "create 2x 1g.10gb, 3g.40gb)"),
        ((("7g.80gb", 1),), ("GPU 0: enable MIG (GPU reset), create 7g.80gb", "GPU 3: destroy 1g.10gb"),
         "MigLayout gpudra-planner-n1 written",
         "would fit on n1 if its MIG layout had a 7g.80gb free (the MIG planner can do this: GPU 0: enable MIG (GPU "
         "reset), create 7g.80gb; GPU 3: destroy 1g.10gb; MigLayout gpudra-planner-n1 written)"),
    ],
)  # fmt: skip
def test_the_planner_sentence(
    profiles: tuple[tuple[str, int], ...], steps: tuple[str, ...], note: str, sentence: str
) -> None:
    assert Repartition("n1", profiles, steps, note).sentence() == sentence


def test_the_planner_leads_and_the_allocator_follows() -> None:
    outcome, _ = examined([gpus("n1", 1, L4)], [claim("c", req("gpu", "gpu.nvidia.com", H100))])
    said = explain_outcome(
        outcome, repartition=Repartition("n1", (("3g.40gb", 1),), ("GPU 0: create 3g.40gb",))
    )
    assert said.headline.startswith("would fit on n1 if its MIG layout had a 3g.40gb free")
    assert said.sentences[0].startswith("no GPU matches request gpu")
    assert said.reason == "NoMatchingDevice"
    said = explain_outcome(outcome, repartition=Repartition(impossible="needs 1x 3g.40gb; ..."))
    assert said.sentences[-1] == "no MIG repartition satisfies it: needs 1x 3g.40gb; ..."


def test_the_text_keeps_the_headline_within_the_limit() -> None:
    slices = [gpus(f"node-with-a-long-name-{i}", 4) for i in range(40)]
    in_use = {f"node-with-a-long-name-{i}": ["gpu-0"] for i in range(40)}
    outcome, _ = examined(slices, [claim("c", req(count=4))], in_use)
    said = explain_outcome(outcome)
    assert len(said.sentences) > 3
    text = said.text(300)
    assert text.startswith(said.headline + ". ")
    assert len(text.encode()) <= 300
    assert said.text(40).endswith("...") and len(said.text(40).encode()) <= 40
    assert "24 more nodes not examined in detail" in said.text(4096)


def test_the_explanation_is_json_for_the_web_view() -> None:
    said = explained(
        [gpus("n1", 1), gpus("n2", 1, L4)], [claim("c", req("gpu", "gpu.nvidia.com", H100, count=2))]
    )
    data = json.loads(json.dumps(said.as_dict()))
    assert data["headline"] == said.headline
    assert [n["node"] for n in data["nodes"]] == ["n1", "n2"]
    assert data["nodes"][0] == {"node": "n1", "tier": SHORT, "reason": "InsufficientDevices", "need": 2, "now": 1,
                                "later": 1, "words": "has 1 of 2"}  # fmt: skip
    assert data["closest"][0] == {
        "node": "n2",
        "device": "gpu-0",
        "kind": "NVIDIA L4",
        "miss": f"fails '{H100}'",
    }


def test_a_device_in_use_and_tainted_is_not_counted_as_freed_when_its_claim_ends() -> None:
    """Ending the claim that holds it would leave its taint (#39: a claim pinned to a tainted GPU in use)."""
    taint = DeviceTaint(key="gpu.nvidia.com/xid", value="79", effect="NoSchedule")
    slices = [slice_("n1", [gpu("gpu-0", taints=[taint]), gpu("gpu-1")])]
    said = explained(slices, [claim("c", req(count=2))], in_use={"n1": ["gpu-0"]})
    assert said.headline == (
        "needs 2 NVIDIA H100 80GB HBM3 on one node; n1 has 2 but gpu-0 is in use and tainted "
        "gpu.nvidia.com/xid=79:NoSchedule, which the request does not tolerate"
    )
    assert [(line.node, line.now, line.later) for line in said.nodes] == [("n1", 1, 1)]
    assert [c.miss for c in said.closest if c.device == "gpu-0"] == [
        "in use; tainted gpu.nvidia.com/xid=79:NoSchedule"
    ]


XID = DeviceTaint(key="gpu.nvidia.com/xid", value="79", effect="NoSchedule")


def test_the_counts_hold_together_after_a_fault_and_while_claims_are_held() -> None:
    """Nine GPUs on one node of two 8-GPU nodes. After an XID taints 3 GPUs of dgx-h100-0 the sentence said "the
    most on any node is 8 (dgx-h100-1). dgx-h100-0 has 8" while that node's row said NOW 5: a node's count is
    what it could give (its WHEN FREED), and the devices it does not count, or cannot give now, are said."""
    nine = [claim("nine", req("gpu", "gpu.nvidia.com", count=9))]
    faulty = slice_("dgx-h100-0", [gpu(f"gpu-{i}", taints=[XID] if i < 3 else None) for i in range(8)])
    after_fault = explained([faulty, gpus("dgx-h100-1", 8)], nine)
    assert after_fault.text() == (
        "needs 9 NVIDIA H100 80GB HBM3 on one node; the most on any node is 8 (dgx-h100-1). dgx-h100-0 has 5, "
        "3 more tainted"
    )
    rows = {n.node: (n.now, n.later, n.words) for n in after_fault.nodes}
    assert rows == {"dgx-h100-1": (8, 8, "has 8 of 9"), "dgx-h100-0": (5, 5, "has 5 of 9, 3 more tainted")}

    held = explained([gpus("dgx-h100-0", 8), gpus("dgx-h100-1", 8)], nine, {"dgx-h100-0": ["gpu-0", "gpu-1"]})
    assert held.text() == (
        "needs 9 NVIDIA H100 80GB HBM3 on one node; the most on any node is 8 (dgx-h100-1, dgx-h100-0)"
    )
    assert [(n.node, n.now, n.later, n.words) for n in held.nodes] == [
        ("dgx-h100-1", 8, 8, "has 8 of 9"),
        ("dgx-h100-0", 6, 8, "has 8 of 9, 2 of them in use"),
    ]
