"""The web view's cards of claims, pending claims (the allocator's explanation), allocated claims not prepared,
ComputeDomains and MigLayouts."""

from __future__ import annotations

from typing import Any

from gpudra.allocator.diagnosis import NodesFailure
from gpudra.api.computedomain import ComputeDomain, ComputeDomainClique
from gpudra.api.dra import ResourceClaim
from gpudra.api.miglayout import MigLayout
from gpudra.cluster.fleet import parse_fleet
from gpudra.cluster.simslices import node_objects
from gpudra.controller.explaining import explain, explanation, view_from_wire
from gpudra.devices.classes import load_device_classes
from gpudra.planning.preparestatus import not_prepared
from gpudra.planning.workloads import (
    ConditionView,
    claim_row,
    claims_by_namespace,
    domain_card,
    layout_card,
    pending_card,
    unprepared_card,
)


def condition(type_: str, status: str, reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def test_claim_rows_show_devices_pods_and_their_conditions() -> None:
    claim = {
        "metadata": {"namespace": "ml", "name": "train"},
        "status": {
            "allocation": {"devices": {"results": [
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n0", "device": "gpu-1"},
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n0", "device": "gpu-2"},
            ]}},
            "reservedFor": [{"resource": "pods", "name": "train-0", "uid": "u"}],
            "devices": [{"driver": "gpu.nvidia.com", "pool": "n0", "device": "gpu-1", "conditions": [
                condition("Ready", "True", "Prepared"), condition("Healthy", "False", "XID79", "fell off the bus")
            ]}],
        },
    }  # fmt: skip
    row = claim_row(ResourceClaim.model_validate(claim))
    assert (row.state, row.pods) == ("reserved", ("train-0",))
    first, second = row.devices
    assert first.device == "gpu-1" and first.ready == ConditionView("Ready", "True", "Prepared")
    assert first.healthy == ConditionView("Healthy", "False", "XID79", "fell off the bus")
    assert second.ready is None and second.healthy is None
    pending = claim_row(ResourceClaim.model_validate({"metadata": {"namespace": "ml", "name": "p"}}))
    assert (pending.state, pending.devices, pending.pods) == ("pending", (), ())
    other = {"metadata": {"namespace": "a", "name": "z"}}
    grouped = claims_by_namespace([ResourceClaim.model_validate(c) for c in (claim, other)])
    assert list(grouped) == ["a", "ml"]


def test_pending_card_carries_the_explanation_node_by_node() -> None:
    objects = [o for n in parse_fleet("dgx-h100:2,l4x4:1", {"dgx-h100", "l4x4"}) for o in node_objects(n)]
    nodes = [o for o in objects if o["kind"] == "Node"]
    slices = [o for o in objects if o["kind"] == "ResourceSlice"]
    classes = [c.to_wire() for c in load_device_classes()]
    body: dict[str, Any] = {
        "metadata": {"namespace": "default", "name": "nine", "uid": "u9"},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                        "count": 9}}]}},
    }  # fmt: skip
    view = view_from_wire(slices, classes, [], [], nodes)
    claim = ResourceClaim.model_validate(body)
    outcome = explain(view, claim)
    assert isinstance(outcome, NodesFailure)
    said = explanation(view, claim, outcome, None)
    card = pending_card(claim, said)
    assert (card.reason, card.headline, card.sentences) == (said.reason, said.headline, said.sentences)
    assert [n.node for n in card.nodes][:2] == ["dgx-h100-0", "dgx-h100-1"]  # the nearest misses first
    assert card.nodes[0].need == 9 and card.nodes[0].now == 8
    fits = pending_card(claim, "dgx-h100-0")
    assert fits.fits_on == "dgx-h100-0" and fits.nodes == ()


def test_unprepared_card_says_where_it_is_allocated_why_it_failed_and_when_it_is_tried_again() -> None:
    refused = condition(
        "Ready", "False", "InvalidConfig", "invalid opaque config: MPS is disabled on this node"
    )
    claim = ResourceClaim.model_validate({
        "metadata": {"namespace": "ml", "name": "mps"},
        "status": {
            "allocation": {
                "devices": {"results": [
                    {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n0", "device": d}
                    for d in ("gpu-0", "gpu-1")
                ]},
                "nodeSelector": {"nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n0"]}]}
                ]},
            },
            "devices": [
                {"driver": "gpu.nvidia.com", "pool": "n0", "device": d, "conditions": [refused]}
                for d in ("gpu-0", "gpu-1")
            ],
        },
    })  # fmt: skip
    card = unprepared_card(claim, not_prepared(claim))
    assert (card.namespace, card.name, card.reason) == ("ml", "mps", "InvalidConfig")
    assert card.headline == "allocated on node n0, not prepared: its pods wait in ContainerCreating"
    assert card.sentences == (  # one failure of both devices, said once
        "not prepared (gpu-0, gpu-1): InvalidConfig: invalid opaque config: MPS is disabled on this node",
        "the kubelet tries the prepare again at its next sync of the pod, a minute or more after it failed",
    )


def test_domain_card_names_why_a_node_is_not_ready() -> None:
    domain = {
        "metadata": {"namespace": "ml", "name": "train", "uid": "d1"},
        "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "train-channel"}}},
        "status": {"status": "NotReady",
                   "nodes": [{"name": "t1", "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 1,
                              "status": "NotReady"},
                             {"name": "t0", "ipAddress": "10.0.0.2", "cliqueID": "c.1", "index": 0,
                              "status": "Ready"},
                             {"name": "t2", "ipAddress": "10.0.0.3", "cliqueID": "c.1", "status": "NotReady"}],
                   "conditions": [condition("Ready", "False", "NodesNotReady", "t1: nvidia-imex exited"),
                                  condition("CliqueConsistent", "True")]},
    }  # fmt: skip
    clique = {"metadata": {"name": "d1.c.1"}, "daemons": [
        {"nodeName": "t1", "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 1, "status": "NotReady",
         "message": "nvidia-imex exited with 1"},
        {"nodeName": "t0", "ipAddress": "10.0.0.2", "cliqueID": "c.1", "index": 0, "status": "Ready"}]}  # fmt: skip
    other = {"metadata": {"name": "d2.c.1"},
             "daemons": [{"nodeName": "x", "ipAddress": "10.0.1.1", "cliqueID": "c.1", "status": "Ready"}]}  # fmt: skip
    cliques = [ComputeDomainClique.model_validate(c) for c in (clique, other)]
    card = domain_card(ComputeDomain.model_validate(domain), cliques)
    assert [(n.name, n.status, n.reason) for n in card.nodes] == [
        ("t0", "Ready", ""), ("t1", "NotReady", "nvidia-imex exited with 1"),
        ("t2", "NotReady", "no IMEX daemon registered yet"),
    ]  # fmt: skip
    assert [(c, [d.node for d in ds]) for c, ds in card.cliques] == [("c.1", ["t0", "t1"])]
    assert [p.type for p in card.problems] == ["Ready"] and card.num_nodes == 2


def test_layout_card_shows_progress_per_node_and_what_blocks() -> None:
    layout = {
        "metadata": {"name": "balanced"},
        "spec": {"policy": "Static", "layout": {"config": "all-balanced"}},
        "status": {"applied": "1/2", "nodes": [
            {"name": "b", "state": "blocked", "message": "in use", "blockedBy": ["ml/train"]},
            {"name": "a", "state": "success"}]},
    }  # fmt: skip
    card = layout_card(MigLayout.model_validate(layout))
    assert (card.source, card.applied, card.states) == (
        "config all-balanced",
        "1/2",
        {"blocked": 1, "success": 1},
    )
    assert [(n.name, n.state, n.blocked_by) for n in card.nodes] == [
        ("a", "success", ()),
        ("b", "blocked", ("ml/train",)),
    ]
    inline = layout_card(MigLayout.model_validate(
        {"metadata": {"name": "x"}, "spec": {"layout": {"entries": [{"devices": "all", "mig-enabled": False}]}}}
    ))  # fmt: skip
    assert (inline.source, inline.applied, inline.nodes) == ("1 inline entry", "0/0", ())
