"""Which MigLayout governs which node, what each node is handed, and the status a user reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpudra.api.miglayout import MigLayout
from gpudra.errors import InvalidInputError
from gpudra.mig.desired import CONFIG_LABEL, DesiredState, NodeGpu, NodeReport
from gpudra.mig.migparted import MigConfigEntry, default_configs
from gpudra.mig.rollout import LayoutInput, NodeInput, NodeOutcome, layout_status, plan_rollout

ROOT = Path(__file__).resolve().parents[2]
H100_GPUS = tuple(NodeGpu(index=i, model="H100-SXM5-80GB", pci_device_id=0x233010DE) for i in range(8))
L4_GPUS = (NodeGpu(index=0, model="L4", pci_device_id=0x27B810DE),)
BALANCED = default_configs().entries("all-balanced")


def layout(name: str, created: str, labels: dict[str, str] | None = None, **kw: Any) -> LayoutInput:
    return LayoutInput(name, 1, created, labels or {}, entries=kw.pop("entries", BALANCED), **kw)


def node(name: str, gpus: tuple[NodeGpu, ...] = H100_GPUS, **labels: str) -> NodeInput:
    return NodeInput(name, {"pool": "a", **labels}, report=NodeReport(gpus=gpus))


def test_each_selected_node_is_handed_the_layout() -> None:
    out = plan_rollout([layout("l", "1")], [node("n1"), node("n2", L4_GPUS)], {})
    assert set(out.desired) == {"n1"}, "an empty selector takes only nodes with MIG-capable GPUs"
    desired = DesiredState.from_json(out.desired["n1"] or "")
    assert (desired.key, desired.entries) == ("MigLayout/l@1", BALANCED)
    assert out.nodes["l"] == [NodeOutcome("n1", "pending", "waiting for the node agent")]


def test_the_oldest_layout_governs_a_node_and_the_newer_reports_the_conflict() -> None:
    out = plan_rollout(
        [layout("new", "2", {"pool": "a"}), layout("old", "1", {"pool": "a"})], [node("n1")], {}
    )
    assert DesiredState.from_json(out.desired["n1"] or "").name == "old"
    (conflict,) = out.nodes["new"]
    assert conflict.state == "conflict" and "older MigLayout old" in conflict.message
    status = layout_status(layout("new", "2"), out.nodes["new"], None, "now")
    invalid = next(c for c in status["conditions"] if c["type"] == "Invalid")
    assert (invalid["status"], invalid["reason"]) == ("True", "NodeConflict")


def test_a_layout_invalid_on_a_nodes_gpus_is_not_handed_to_it() -> None:
    bad = (MigConfigEntry("all", True, (("4g.40gb", 2),)),)
    before = NodeInput("n1", {}, desired="previous", report=NodeReport(gpus=H100_GPUS))
    out = plan_rollout([layout("bad", "1", entries=bad)], [before], {})
    assert out.desired == {}, "the node keeps its previous desired state"
    (outcome,) = out.nodes["bad"]
    assert outcome.state == "invalid"
    assert "GPU 0: invalid MIG layout for H100-SXM5-80GB: too many 4g.40gb" in outcome.message


def test_the_mig_config_label_names_a_config_and_a_layout_takes_precedence() -> None:
    labelled = node("n1", H100_GPUS, **{CONFIG_LABEL: "all-balanced"})
    out = plan_rollout([], [labelled, node("n2", H100_GPUS, **{CONFIG_LABEL: "nope"})], {
        "all-balanced": (BALANCED, ""), "nope": ((), "no mig-parted config named 'nope'")})  # fmt: skip
    assert DesiredState.from_json(out.desired["n1"] or "").source == "Label"
    assert out.failed_labels == {"n2": f"{CONFIG_LABEL}=nope: no mig-parted config named 'nope'"}
    governed = plan_rollout([layout("l", "1")], [labelled], {"all-balanced": (BALANCED, "")})
    assert DesiredState.from_json(governed.desired["n1"] or "").source == "MigLayout"


def test_a_deselected_node_loses_its_desired_state() -> None:
    out = plan_rollout([], [NodeInput("n1", {}, desired="old")], {})
    assert out.desired == {"n1": None}


def test_status_counts_conditions_and_keeps_transition_times() -> None:
    lay = layout("l", "1")
    outcomes = [NodeOutcome("a", "success"), NodeOutcome("b", "blocked", "in use by ns/c", ("ns/c",))]
    first = layout_status(lay, outcomes, None, "t1")
    assert (first["applied"], first["nodesSelected"], first["nodesBlocked"]) == ("1/2", 2, 1)
    by_type = {c["type"]: c for c in first["conditions"]}
    assert by_type["Blocked"]["status"] == "True" and "b: in use by ns/c" in by_type["Blocked"]["message"]
    assert by_type["Applied"]["status"] == "False"
    assert layout_status(lay, outcomes, first, "t2") == first, "no change, no new status to write"


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("miglayout-*.yaml")))
def test_examples_are_valid_miglayouts(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d["kind"] == "MigLayout"]
    assert docs
    for doc in docs:
        MigLayout.from_wire(doc)


def test_a_malformed_layout_selects_no_node_and_says_why() -> None:
    broken = LayoutInput(
        "broken", 1, "0", {}, problem="invalid spec: spec.layout: Field required", parsed=False
    )
    out = plan_rollout([broken, layout("good", "1")], [node("n1")], {})
    assert out.nodes["broken"] == [] and out.nodes["good"][0].state == "pending"
    status = layout_status(broken, [], None, "now")
    invalid = next(c for c in status["conditions"] if c["type"] == "Invalid")
    assert (invalid["status"], invalid["message"]) == ("True", "invalid spec: spec.layout: Field required")


def test_the_annotation_carries_mig_parted_documents_and_the_agent_reads_them_back_strictly() -> None:
    out = plan_rollout([layout("l", "1")], [node("n1")], {})
    text = out.desired["n1"] or ""
    assert json.loads(text)["entries"] == [e.to_document() for e in BALANCED], "the wire form is mig-parted's"
    assert DesiredState.from_json(text).entries == BALANCED
    hand_edited = json.loads(text)
    hand_edited["entries"][0]["mig-device"] = {"1g.10gb": 7}
    with pytest.raises(InvalidInputError, match=r"entries\[0\]: unknown field 'mig-device'"):
        DesiredState.from_json(json.dumps(hand_edited))
