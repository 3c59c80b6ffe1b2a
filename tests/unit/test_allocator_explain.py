"""Explanations: reason codes, the numbers behind them, and the text an Event would carry."""

from __future__ import annotations

from _allocator_kit import claim, gpu, gpus, make_allocator, match, mig, req, slice_

from gpudra.allocator import REASONS, DeviceId, Failure, NodeInfo, NodesFailure, explain_outcome, render_text
from gpudra.allocator.explain.nearest import examine
from gpudra.api.dra import DeviceTaint

H100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'
B300 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA B300"'


def test_no_matching_device_names_the_selector_and_closest_devices() -> None:
    allocator = make_allocator([gpus("n1", 4, "NVIDIA A100-SXM4-40GB")])
    outcome = allocator.allocate("n1", [claim("train", req("gpu", "gpu.nvidia.com", H100))])
    assert isinstance(outcome, Failure)
    d = outcome.requests[0]
    assert (d.reason, d.devices, d.class_kept, d.request_kept) == ("NoMatchingDevice", 4, 4, 0)
    assert d.selectors[0].eliminated == 4
    assert [str(c.device) for c in d.candidates][:1] == ["gpu.nvidia.com/n1/gpu-0"]
    assert all(c.failed == (H100,) for c in d.candidates)
    assert render_text(outcome) == f"no GPU matches request gpu: 4 NVIDIA A100-SXM4-40GB fail only '{H100}'"


def test_in_use_and_tainted_counts() -> None:
    taint = DeviceTaint(key="gpu.nvidia.com/gpu-lost", effect="NoSchedule")
    allocator = make_allocator([slice_("n1", [gpu("gpu-0"), gpu("gpu-1", taints=[taint]), gpu("gpu-2")])])
    allocator.snapshot.allocate_device(DeviceId("gpu.nvidia.com", "n1", "gpu-0"))
    allocator.snapshot.allocate_device(DeviceId("gpu.nvidia.com", "n1", "gpu-2"))
    outcome = allocator.allocate("n1", [claim("c", req())])
    assert isinstance(outcome, Failure)
    d = outcome.requests[0]
    assert (d.reason, d.in_use, d.tainted, d.free) == ("DevicesInUse", 2, 1, 0)
    assert render_text(outcome) == (
        "n1 has 3 matching NVIDIA H100 80GB HBM3 but 2 are in use and gpu-1 is tainted "
        "gpu.nvidia.com/gpu-lost:NoSchedule, which the request does not tolerate"
    )
    holders = {
        DeviceId("gpu.nvidia.com", "n1", "gpu-0"): "default/a",
        DeviceId("gpu.nvidia.com", "n1", "gpu-2"): "x/b",
    }
    assert "2 are in use by default/a and x/b and gpu-1" in explain_outcome(outcome, holders=holders).headline


def test_constraint_conflict_lists_values() -> None:
    devices = [mig(f"gpu-{g}-mig-{i}", f"gpu-{g}", "1g.5gb") for g in range(2) for i in range(3)]
    allocator = make_allocator([slice_("n1", devices)])
    c = claim("c", req("m", "mig.nvidia.com", count=4), constraints=[match("gpu.nvidia.com/parentUUID")])
    outcome = allocator.allocate("n1", [c])
    assert isinstance(outcome, Failure)
    d = outcome.requests[0]
    assert d.reason == "ConstraintConflict"
    assert d.values == {"GPU-gpu-0": 3, "GPU-gpu-1": 3}
    assert "parentUUID" in render_text(outcome)


def test_nodes_failure_aggregates_per_reason() -> None:
    slices = [gpus("n1", 2, "NVIDIA A100-SXM4-40GB"), gpus("n2", 1), gpus("n3", 2), gpus("n4", 2)]
    allocator = make_allocator(slices)
    for dev in ("gpu-0", "gpu-1"):
        allocator.snapshot.allocate_device(DeviceId("gpu.nvidia.com", "n3", dev))
    allocator.snapshot.allocate_device(DeviceId("gpu.nvidia.com", "n4", "gpu-0"))
    c = claim("c", req("gpu", "gpu.nvidia.com", H100, count=2))
    outcome = allocator.find_node([c])
    assert isinstance(outcome, NodesFailure)
    assert outcome.total == 4
    assert outcome.by_reason == {"NoMatchingDevice": 1, "InsufficientDevices": 1, "DevicesInUse": 2}
    nodes = [NodeInfo(f"n{i}") for i in range(1, 5)]
    examined = examine(outcome, [c], nodes, allocator)
    assert examined.by_reason == outcome.by_reason
    assert render_text(examined) == (
        "needs 2 NVIDIA H100 80GB HBM3 on one node; n4 has 2 but gpu-0 is in use. n3 has 2 but all are in use. "
        "n2 has 1. 1 other node has no NVIDIA H100 80GB HBM3 (NVIDIA A100-SXM4-40GB on n1)"
    )


def test_model_that_does_not_exist_anywhere_is_answered_without_search() -> None:
    allocator = make_allocator([gpus(f"n{i}", 8) for i in range(50)])
    outcome = allocator.find_node([claim("c", req("gpu", "gpu.nvidia.com", B300))])
    assert isinstance(outcome, NodesFailure)
    assert outcome.by_reason == {"NoMatchingDevice": 50}
    assert "no device in the cluster" in outcome.failures[-1].requests[0].message


def test_class_not_found_and_admin_denied_are_not_per_node() -> None:
    allocator = make_allocator([gpus("n1", 1)])
    outcome = allocator.find_node([claim("c", req("gpu", "missing.example.com"))])
    assert isinstance(outcome, Failure)
    assert outcome.reason == "ClassNotFound"
    assert "missing.example.com" in render_text(outcome)
    outcome = allocator.find_node([claim("c", req(admin=True))])
    assert isinstance(outcome, Failure)
    assert outcome.reason == "AdminAccessDenied"


def test_search_limit_is_reported() -> None:
    devices = [gpu(f"gpu-{i}", group=i % 2) for i in range(12)]
    allocator = make_allocator([slice_("n1", devices)], budget=5)
    c = claim("c", req("a", count=3), req("b", count=3), constraints=[match("gpu.nvidia.com/group")])
    outcome = allocator.allocate("n1", [c])
    assert isinstance(outcome, Failure)
    assert outcome.reason == "SearchLimit"


def test_reasons_are_a_small_documented_set() -> None:
    import gpudra.allocator.diagnosis as explain

    assert len(REASONS) <= 14
    for reason in REASONS:
        assert reason in (explain.__doc__ or "")


def test_text_is_capped_at_one_kib() -> None:
    allocator = make_allocator([gpus("n1", 2)])
    requests = [req(f"request-with-a-long-name-{i}", "gpu.nvidia.com", B300) for i in range(30)]
    outcome = allocator.allocate("n1", [claim("c", *requests)])
    assert isinstance(outcome, Failure)
    assert len(render_text(outcome).encode()) <= 1024
