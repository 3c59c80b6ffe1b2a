"""The MIG planner, asked about claims that want no MIG device (most pending claims: whole GPUs), answers without
scanning the fleet's GPUs, round after round; a claim that wants a MIG profile still gets its repartition."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.allocator import Allocator, ClusterSnapshot
from gpudra.api.dra import ResourceClaim, ResourceSlice
from gpudra.cluster.fleet import parse_fleet
from gpudra.cluster.simslices import node_objects
from gpudra.devices.classes import load_device_classes
from gpudra.mig import DemandPlan
from gpudra.planning import migdemand


def _claim(name: str, device_class: str, expression: str | None = None) -> ResourceClaim:
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if expression is not None:
        exactly["selectors"] = [{"cel": {"expression": expression}}]
    return ResourceClaim.model_validate(
        {
            "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": exactly}]}},
        }
    )


def test_claims_for_whole_gpus_cost_no_scan_of_the_fleet(monkeypatch: pytest.MonkeyPatch) -> None:
    slices = [
        ResourceSlice.model_validate(body)
        for node in parse_fleet("dgx-h100:4", {"dgx-h100"})
        for body in node_objects(node)[1:]
    ]
    allocator = Allocator(ClusterSnapshot(slices), load_device_classes())
    scans: list[object] = []
    scan = migdemand._scan

    def counting(*args: Any) -> Any:
        scans.append(args)
        return scan(*args)

    monkeypatch.setattr(migdemand, "_scan", counting)
    whole = [_claim(f"whole-{i}", "gpu.nvidia.com") for i in range(3)]
    for _ in range(5):  # five rounds of explanations
        assert migdemand.plan_pending(allocator, whole, "gpu.nvidia.com") == DemandPlan()
    assert len(scans) == 1  # the virtual fleet, once while the slices are unchanged

    mig = _claim("mig", "mig.nvidia.com", 'device.attributes["gpu.nvidia.com"].profile == "3g.40gb"')
    plan = migdemand.plan_pending(allocator, [*whole, mig], "gpu.nvidia.com")
    assert plan.placed.get("default/mig"), plan


def test_claims_of_shapes_known_to_want_no_mig_device_are_not_sorted_by_age(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slices = [
        ResourceSlice.model_validate(body)
        for node in parse_fleet("dgx-h100:2", {"dgx-h100"})
        for body in node_objects(node)[1:]
    ]
    allocator = Allocator(ClusterSnapshot(slices), load_device_classes())
    whole = [_claim(f"whole-{i}", "gpu.nvidia.com") for i in range(30)]
    assert migdemand.plan_pending(allocator, whole, "gpu.nvidia.com") == DemandPlan()  # its shape learned
    aged: list[str] = []
    created = migdemand._created

    def counting(claim: ResourceClaim) -> tuple[float, str]:
        aged.append(claim.metadata.name or "")
        return created(claim)

    monkeypatch.setattr(migdemand, "_created", counting)
    for _ in range(3):  # the next rounds, every pending claim planned for again
        assert migdemand.plan_pending(allocator, whole, "gpu.nvidia.com") == DemandPlan()
    assert aged == []
    mig = _claim("mig", "mig.nvidia.com", 'device.attributes["gpu.nvidia.com"].profile == "3g.40gb"')
    assert migdemand.plan_pending(allocator, [*whole, mig], "gpu.nvidia.com").placed.get("default/mig")
    assert aged == ["mig"]
