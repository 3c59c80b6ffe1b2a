"""What the controller feeds the MIG planner and does with its answer: the fleet read from published slices
(allocated devices in use), each claim's MIG demand found by the real CEL selectors (profile selectors,
per-profile DeviceClasses, memory selectors), and the apply policy's MigLayout decisions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpudra.allocator.pools import NodeInfo
from gpudra.api.dra import ResourceClaim, ResourceSlice
from gpudra.controller.explaining import ClusterView, repartition, view_from_wire
from gpudra.controller.migplanner import decide, progressing, superseded
from gpudra.devices.build import build_devices
from gpudra.devices.classes import load_device_classes
from gpudra.devices.slices import build_slice_specs
from gpudra.hardware.simulated import simulated_backend
from gpudra.planning.migdemand import (
    claim_demand,
    fleet_gpus,
    plan_pending,
    virtual_fleet,
)
from gpudra.planning.migmodels import FleetMigModels

ROOT = Path(__file__).resolve().parents[2]
NODE = "dgx-a100-0"
DRIVER = "gpu.nvidia.com"


def slices() -> list[dict[str, Any]]:
    inventory = simulated_backend("dgx-a100", NODE).backend.read_inventory()
    specs = build_slice_specs(node_name=NODE, driver=DRIVER, devices=build_devices(inventory), generation=1)
    return [
        ResourceSlice(metadata={"name": f"{NODE}-{i}"}, spec=spec).to_wire() for i, spec in enumerate(specs)
    ]


def classes() -> list[dict[str, Any]]:
    shipped = [c.to_wire() for c in load_device_classes()]
    return shipped + list(
        yaml.safe_load_all((ROOT / "examples/extended-resources/mig-classes.yaml").read_text())
    )


def claim(name: str, device_class: str, *selectors: str, count: int = 1, **status: Any) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                     "creationTimestamp": f"2026-01-01T00:00:{len(name):02d}Z"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": exactly}]}},
        "status": status,
    }  # fmt: skip


def busy_3g() -> dict[str, Any]:
    """Every 3g.20gb of the node allocated."""
    devices = [d["name"] for s in slices() for d in s["spec"]["devices"] if "-mig-3g20gb-" in d["name"]]
    results = [{"request": "r", "driver": DRIVER, "pool": NODE, "device": d} for d in devices]
    return claim("busy", "mig.nvidia.com", count=8, allocation={"devices": {"results": results}})


def view(*claims: dict[str, Any]) -> ClusterView:
    node = {"metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}}}
    return view_from_wire(slices(), classes(), list(claims), [], [node])


def demand_of(body: dict[str, Any]) -> list[str] | None:
    v = view()
    fleet = virtual_fleet(v.allocator.snapshot, DRIVER)
    demand = claim_demand(ResourceClaim.model_validate(body), fleet, v.allocator)
    return None if demand is None else [c.profile for r in demand.requests for c in r.choices]


def test_fleet_is_read_from_slices_with_allocated_devices_in_use() -> None:
    gpus = fleet_gpus(view(busy_3g()).allocator.snapshot, DRIVER)
    assert [(g.node, g.state.index) for g in gpus] == [(NODE, i) for i in range(8)]
    assert all(str(g.state.layout) == "[2g.10gb@0, 1g.5gb@2, 1g.5gb@3, 3g.20gb@4]" for g in gpus)
    assert all([str(i) for i in g.state.in_use(g.in_use)] == [f"3g.20gb@4 (GI 4, {g.state.instances[3].uuid})"]
               for g in gpus)  # fmt: skip


def test_profile_selector_names_one_profile() -> None:
    assert demand_of(
        claim("a", "mig.nvidia.com", "device.attributes['gpu.nvidia.com'].profile == '3g.20gb'")
    ) == ["3g.20gb"]


def test_per_profile_device_class_of_extended_resources() -> None:
    assert demand_of(claim("a", "mig-3g.20gb.nvidia.com")) == ["3g.20gb"]


def test_memory_selector_accepts_every_large_enough_profile_smallest_first() -> None:
    body = claim(
        "a", "mig.nvidia.com", "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('15Gi')) >= 0"
    )
    assert demand_of(body) == ["3g.20gb", "4g.20gb", "7g.40gb"]


def test_whole_gpu_claims_are_not_the_planners() -> None:
    assert demand_of(claim("a", "gpu.nvidia.com")) is None


def test_plan_for_pending_claims_over_the_view() -> None:
    v = view(busy_3g())
    pending = [ResourceClaim.model_validate(claim("wants", "mig-3g.20gb.nvidia.com"))]
    plan = plan_pending(v.allocator, pending, DRIVER)
    said = repartition(plan, pending[0])
    assert said is not None
    assert said.sentence() == (
        f"would fit on {NODE} if its MIG layout had a 3g.20gb free (the MIG planner can do this: GPU 0: destroy "
        "2x 1g.5gb, 2g.10gb, create 3g.20gb)"
    )


def _planner_layout(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"gpudra-planner-{NODE}",
            "generation": 2,
            "labels": {"gpudra.dev/planner": "true"},
        },
        "spec": {
            "layout": {"entries": [{"devices": [5], "mig-enabled": True, "mig-devices": {"7g.40gb": 1}}]}
        },
        "status": status,
    }


def test_progressing_until_the_reconciler_reports_the_generation_done() -> None:
    assert progressing(_planner_layout())
    assert progressing(_planner_layout(observedGeneration=2, nodes=[{"name": NODE, "state": "applying"}]))
    assert not progressing(_planner_layout(observedGeneration=2, nodes=[{"name": NODE, "state": "success"}]))


def test_decisions_merge_new_gpus_into_the_planner_layout_and_respect_user_layouts() -> None:
    v = view(busy_3g())
    plan = plan_pending(
        v.allocator, [ResourceClaim.model_validate(claim("wants", "mig-3g.20gb.nvidia.com"))], DRIVER
    )
    done = _planner_layout(observedGeneration=2)
    (decision,) = decide(plan, v.nodes, [done], FleetMigModels().pci_device_ids())
    assert decision.body is not None
    assert decision.body["spec"]["layout"]["entries"] == [
        {"device-filter": ["0x20B010DE"], "devices": [0], "mig-enabled": True, "mig-devices": {"3g.20gb": 2}},
        {"devices": [5], "mig-enabled": True, "mig-devices": {"7g.40gb": 1}},
    ]
    (waiting,) = decide(plan, v.nodes, [_planner_layout()], FleetMigModels().pci_device_ids())
    assert waiting.body is None and "still being applied" in waiting.note
    user = {"metadata": {"name": "everything"}, "spec": {"layout": {"config": "all-balanced"}}}
    (blocked,) = decide(plan, v.nodes, [done, user], FleetMigModels().pci_device_ids())
    assert blocked.body is None
    assert blocked.note == f"not applied: MigLayout everything (not the planner's) selects node {NODE}"


def test_a_node_following_the_mig_config_label_is_only_suggested() -> None:
    v = view(busy_3g())
    plan = plan_pending(
        v.allocator, [ResourceClaim.model_validate(claim("wants", "mig-3g.20gb.nvidia.com"))], DRIVER
    )
    labelled = [NodeInfo(NODE, {"kubernetes.io/hostname": NODE, "nvidia.com/mig.config": "all-balanced"})]
    (decision,) = decide(plan, labelled, [], FleetMigModels().pci_device_ids())
    assert decision.body is None
    assert decision.note == f"not applied: node {NODE} follows its label nvidia.com/mig.config=all-balanced"


def test_planner_layout_steps_aside_for_a_users_layout_on_its_node() -> None:
    nodes = view().nodes
    ours = _planner_layout(observedGeneration=2)
    user = {
        "metadata": {"name": "team"},
        "spec": {"nodeSelector": {"matchLabels": {"kubernetes.io/hostname": NODE}}},
    }
    other = {"metadata": {"name": "elsewhere"}, "spec": {"nodeSelector": {"matchLabels": {"pool": "b"}}}}
    assert superseded([ours, other], nodes) == []
    assert superseded([ours, user], nodes) == [f"gpudra-planner-{NODE}"]
