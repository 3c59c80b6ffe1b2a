"""An allocator kept across many pods remembers per node what a request shape selects, each node's free-device
count and where the last claim of a shape landed. Whatever happens in between (allocations, frees, a node's slice
replaced), it must answer every pod as an allocator built afresh over the same slices and allocations: the same
node and devices, or no node."""

from __future__ import annotations

from random import Random
from typing import Any

from _allocator_kit import DRIVER, claim, device_class, gpu, make_allocator, match, req, slice_, sub
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra.allocator import Allocation, Allocator, NodesFailure, render_text
from gpudra.api.dra import DeviceRequest, DeviceTaint, DeviceToleration, ResourceClaim, ResourceSlice

PRODUCTS = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"]
NODES = [f"n{i}" for i in range(5)]


def _slice(r: Random, node: str) -> ResourceSlice:
    """The node's one slice (same name each time, so publishing it again replaces it)."""
    devices = [
        gpu(
            f"gpu-{i}",
            r.choice(PRODUCTS),
            taints=[DeviceTaint(key="maintenance", effect="NoSchedule")] if r.random() < 0.15 else None,
            group=r.randrange(2),
        )
        for i in range(r.randrange(0, 5))
    ]
    return slice_(node, devices, name=f"{node}-{DRIVER}")


def _claim(r: Random, name: str) -> ResourceClaim:
    product = f'device.attributes["gpu.nvidia.com"].productName == "{r.choice(PRODUCTS)}"'
    tolerate = [DeviceToleration(key="maintenance", operator="Exists")] if r.random() < 0.3 else None
    shape = r.randrange(4)
    request: DeviceRequest
    if shape == 0:
        request = req("gpu", "gpu.nvidia.com", product, count=r.randint(1, 3), tolerations=tolerate)
        return claim(name, request)
    if shape == 1:
        request = req("gpu", "gpu.nvidia.com", count=r.randint(1, 3), tolerations=tolerate)
        return claim(name, request, constraints=[match("gpu.nvidia.com/group")])
    if shape == 2:
        first = DeviceRequest(
            name="gpu", first_available=[sub("big", count=3), sub("one", "gpu.nvidia.com", product)]
        )
        return claim(name, first)
    return claim(name, req("a", "gpu.nvidia.com", product), req("b", "gpu.nvidia.com", count=r.randint(1, 2)))


def _answer(outcome: Any) -> Any:
    if isinstance(outcome, Allocation):
        return outcome.node, [
            (r.request, r.pool, r.device)
            for c in outcome.claims
            for r in (c.result.devices.results or [] if c.result.devices else [])
        ]
    if isinstance(outcome, NodesFailure):
        # No node fits. Not compared: the per-node reasons, which a remembered failure keeps from when it was
        # found (allocations since can only have made it worse).
        return "no node"
    return outcome.reason


def _fresh(slices: dict[str, ResourceSlice], live: list[Allocation]) -> Allocator:
    allocator = make_allocator(list(slices.values()), real_cel=True)
    for allocation in live:
        allocator.commit(allocation)
    return allocator


@settings(max_examples=40, deadline=None)
@given(st.randoms(use_true_random=False))
def test_a_long_lived_allocator_answers_as_a_fresh_one(r: Random) -> None:
    slices = {node: _slice(r, node) for node in NODES}
    kept = make_allocator(list(slices.values()), real_cel=True)
    live: list[Allocation] = []
    for step in range(40):
        action = r.random()
        if action < 0.2 and live:
            gone = live.pop(r.randrange(len(live)))
            for c in gone.claims:
                kept.snapshot.mark_free(c.result)
            continue
        if action < 0.3:
            node = r.choice(NODES)
            slices[node] = _slice(r, node)
            kept.snapshot.add_slice(slices[node])
            continue
        pod = [_claim(r, f"c{step}")]
        outcome = kept.find_node(pod)
        assert _answer(outcome) == _answer(_fresh(slices, live).find_node(pod)), f"step {step}"
        if isinstance(outcome, Allocation):
            kept.commit(outcome)
            live.append(outcome)


def test_a_claim_written_like_an_earlier_one_follows_a_replaced_device_class() -> None:
    h100, a100 = PRODUCTS
    kept = make_allocator(
        [slice_("n0", [gpu("gpu-0", h100)]), slice_("n1", [gpu("gpu-0", a100)])], real_cel=True
    )
    first = kept.find_node([claim("c1", req("gpu", "gpu.nvidia.com"))])
    assert isinstance(first, Allocation) and first.node == "n0"
    kept.snapshot.mark_free(first.claims[0].result)
    only_a100 = f'device.attributes["gpu.nvidia.com"].productName == "{a100}"'
    kept.classes["gpu.nvidia.com"] = device_class("gpu.nvidia.com", only_a100)
    again = kept.find_node([claim("c2", req("gpu", "gpu.nvidia.com"))])
    assert isinstance(again, Allocation) and again.node == "n1"


def test_a_class_replaced_by_one_no_device_matches_is_answered_as_matching_nowhere() -> None:
    kept = make_allocator([slice_("n0", [gpu("gpu-0")]), slice_("n1", [gpu("gpu-0")])], real_cel=True)
    assert isinstance(kept.find_node([claim("c1", req("gpu", "gpu.nvidia.com"))]), Allocation)
    b300 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA B300"'
    kept.classes["gpu.nvidia.com"] = device_class("gpu.nvidia.com", b300)
    outcome = kept.find_node([claim("c2", req("gpu", "gpu.nvidia.com"))])
    assert isinstance(outcome, NodesFailure)
    assert outcome.reason == "NoMatchingDevice"
    assert outcome.by_reason == {"NoMatchingDevice": 2}
    assert [f.node for f in outcome.failures] == [
        None
    ]  # answered for the whole cluster, as a fresh allocator
    fresh = make_allocator([slice_("n0", [gpu("gpu-0")]), slice_("n1", [gpu("gpu-0")])], real_cel=True)
    fresh.classes["gpu.nvidia.com"] = kept.classes["gpu.nvidia.com"]
    fresh_outcome = fresh.find_node([claim("c2", req("gpu", "gpu.nvidia.com"))])
    assert isinstance(fresh_outcome, NodesFailure)
    assert render_text(outcome) == render_text(fresh_outcome)


def test_admin_access_follows_the_namespace_label_between_claims_written_alike() -> None:
    kept = make_allocator([slice_("n0", [gpu("gpu-0")])], real_cel=True)
    kept.namespace_labels = {"ops": {"resource.kubernetes.io/admin-access": "true"}}
    admin = req("gpu", "gpu.nvidia.com", admin=True)
    assert isinstance(kept.find_node([claim("c1", admin, namespace="ops")]), Allocation)
    kept.namespace_labels = {"ops": {}}
    denied = kept.find_node([claim("c2", admin, namespace="ops")])
    assert not isinstance(denied, Allocation)
    assert denied.reason == "AdminAccessDenied"


def test_devices_given_back_on_several_nodes_are_taken_in_node_order() -> None:
    """Churn: devices come back on nodes behind the place where the last claim of a shape landed; each later
    claim of that shape takes the first such node that still has one, as a fresh allocator would."""
    slices = {f"n{i}": slice_(f"n{i}", [gpu("gpu-0")]) for i in range(6)}
    kept = make_allocator(list(slices.values()), real_cel=True)
    live: dict[str, Allocation] = {}
    for i in range(6):
        placed = kept.find_node([claim(f"fill{i}", req("gpu", "gpu.nvidia.com"))])
        assert isinstance(placed, Allocation)
        kept.commit(placed)
        live[placed.node] = placed
    for node in ("n4", "n1", "n3"):
        kept.snapshot.mark_free(live.pop(node).claims[0].result)
    # Another shape takes n1's device back before the first shape looks again.
    h100 = f'device.attributes["gpu.nvidia.com"].productName == "{PRODUCTS[0]}"'
    other = kept.find_node([claim("other", req("gpu", "gpu.nvidia.com", h100))])
    assert isinstance(other, Allocation) and other.node == "n1"
    kept.commit(other)
    live["n1"] = other
    answers = []
    for name in ("a", "b", "c"):
        pod = [claim(name, req("gpu", "gpu.nvidia.com"))]
        outcome = kept.find_node(pod)
        assert _answer(outcome) == _answer(_fresh(slices, list(live.values())).find_node(pod))
        answers.append(outcome.node if isinstance(outcome, Allocation) else None)
        if isinstance(outcome, Allocation):
            kept.commit(outcome)
            live[outcome.node] = outcome
    assert answers == ["n3", "n4", None]
