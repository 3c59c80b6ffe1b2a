"""The allocator through the real CEL compiler (gpudra.allocator.cel.selectors): the default when none is injected."""

from __future__ import annotations

from _allocator_kit import CLASSES, claim, gpu, gpus, picked, req, slice_

from gpudra.allocator import Allocation, Allocator, ClusterSnapshot, Failure, render_text
from gpudra.api.dra import ResourceSlice

H100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'


def allocator(*slices: ResourceSlice) -> Allocator:
    return Allocator(ClusterSnapshot(list(slices)), CLASSES, share_id=lambda: "s")


def test_real_cel_selects_by_attribute_and_capacity() -> None:
    a = allocator(slice_("n1", [gpu("gpu-0", "NVIDIA A100-SXM4-40GB", memory="40Gi"), gpu("gpu-1")]))
    memory = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("64Gi")) >= 0'
    outcome = a.allocate("n1", [claim("c", req("gpu", "gpu.nvidia.com", H100, memory))])
    assert isinstance(outcome, Allocation)
    assert picked(outcome)[0].device == "gpu-1"


def test_real_cel_version_attribute() -> None:
    a = allocator(gpus("n1", 2))
    expr = 'device.attributes["gpu.nvidia.com"].cudaComputeCapability.isGreaterThan(semver("8.0.0"))'
    assert isinstance(a.allocate("n1", [claim("c", req("gpu", "gpu.nvidia.com", expr, count=2))]), Allocation)


def test_real_cel_compile_error_is_reported() -> None:
    outcome = allocator(gpus("n1", 1)).allocate(
        "n1", [claim("c", req("gpu", "gpu.nvidia.com", "device.nope =="))]
    )
    assert isinstance(outcome, Failure)
    assert outcome.reason == "InvalidSelector"
    assert "request gpu" in render_text(outcome)


def test_real_cel_runtime_error_is_an_error_for_the_node() -> None:
    expr = 'device.attributes["gpu.nvidia.com"].missingAttribute == "x"'
    outcome = allocator(gpus("n1", 1)).allocate("n1", [claim("c", req("gpu", "gpu.nvidia.com", expr))])
    assert isinstance(outcome, Failure)
    assert outcome.reason == "InvalidSelector"
    assert "on device gpu.nvidia.com/n1/gpu-0: no such key: missingAttribute" in outcome.message
