"""Planning slice writes: first publish creates, a restart with nothing changed writes nothing, a change moves the
whole pool to the next generation in place, growth creates and shrinkage deletes (deletes first), names survive."""

from typing import Any

from gpudra.agent.slicesync import SLICE_INDEX_LABEL, NodeRef, plan_slices
from gpudra.api.dra import Device, DeviceAttribute, ResourceSlice
from gpudra.devices.dynamic import build_node_devices
from gpudra.devices.slices import CounterLayout, counter_layout_for
from gpudra.hardware.gpus.backend import MigProfileInfo
from gpudra.hardware.gpus.inventory import NodeInventory
from gpudra.hardware.simulated import empty_mig, simulated_backend

NODE = NodeRef(name="node-a", uid="uid-a")
DRIVER = "gpu.nvidia.com"


def devices(n: int, product: str = "NVIDIA H100 80GB HBM3") -> list[Device]:
    return [
        Device(
            name=f"gpu-{i}",
            attributes={
                "type": DeviceAttribute(string="gpu"),
                "productName": DeviceAttribute(string=product),
            },
        )
        for i in range(n)
    ]


def wire(planned: list[ResourceSlice]) -> list[dict[str, Any]]:
    """The planned slices as they are written."""
    return [s.to_wire() for s in planned]


def stored(planned: list[ResourceSlice], start: int = 0) -> list[dict[str, Any]]:
    """What the server holds after creating the planned slices (names given, generateName resolved)."""
    out = []
    for i, body in enumerate(wire(planned), start):
        meta = dict(body["metadata"])
        meta.pop("generateName", None)
        meta["name"] = f"node-a-gpu.nvidia.com-{i:05d}"
        meta["resourceVersion"] = str(100 + i)
        out.append(body | {"metadata": meta})
    return out


def parsed(bodies: list[dict[str, Any]]) -> list[ResourceSlice]:
    """The stored slices as the publisher lists them."""
    return [ResourceSlice.model_validate(b) for b in bodies]


def test_first_publish_creates_one_slice_owned_by_the_node() -> None:
    plan = plan_slices([], devices(8), node=NODE, driver=DRIVER)
    assert (len(plan.creates), plan.updates, plan.deletes, plan.generation) == (1, [], [], 1)
    body = plan.creates[0].to_wire()
    assert body["metadata"]["generateName"] == "node-a-gpu.nvidia.com-"
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "uid-a", "controller": True}
    ]
    assert body["spec"]["nodeName"] == "node-a"
    assert body["spec"]["pool"] == {"name": "node-a", "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in body["spec"]["devices"]] == [f"gpu-{i}" for i in range(8)]


def test_restart_with_unchanged_hardware_writes_nothing() -> None:
    existing = stored(plan_slices([], devices(8), node=NODE, driver=DRIVER).creates)
    plan = plan_slices(parsed(existing), devices(8), node=NODE, driver=DRIVER)
    assert plan.empty
    assert plan.generation == 1


def test_changed_devices_update_in_place_with_next_generation() -> None:
    existing = stored(plan_slices([], devices(8), node=NODE, driver=DRIVER).creates)
    plan = plan_slices(parsed(existing), devices(7), node=NODE, driver=DRIVER)
    assert (plan.creates, plan.deletes) == ([], [])
    (update,) = wire(plan.updates)
    assert update["metadata"]["name"] == existing[0]["metadata"]["name"]
    assert update["metadata"]["resourceVersion"] == existing[0]["metadata"]["resourceVersion"]
    assert update["spec"]["pool"]["generation"] == 2
    assert len(update["spec"]["devices"]) == 7


def test_growth_past_128_devices_splits_and_creates_the_extra_slice() -> None:
    existing = stored(plan_slices([], devices(100), node=NODE, driver=DRIVER).creates)
    plan = plan_slices(parsed(existing), devices(200), node=NODE, driver=DRIVER)
    assert len(plan.updates) == 1 and len(plan.creates) == 1 and plan.deletes == []
    assert (plan.creates[0].metadata.labels or {})[SLICE_INDEX_LABEL] == "1"
    counts = [s.spec.pool.resource_slice_count for s in plan.updates + plan.creates]
    assert counts == [2, 2]


def test_shrinking_deletes_obsolete_slices() -> None:
    existing = stored(plan_slices([], devices(200), node=NODE, driver=DRIVER).creates)
    assert len(existing) == 2
    plan = plan_slices(parsed(existing), devices(10), node=NODE, driver=DRIVER)
    assert plan.deletes == [existing[1]["metadata"]["name"]]
    assert [u.metadata.name for u in plan.updates] == [existing[0]["metadata"]["name"]]


def test_slices_edited_by_someone_else_are_repaired() -> None:
    existing = stored(plan_slices([], devices(4), node=NODE, driver=DRIVER).creates)
    existing[0]["spec"]["devices"] = existing[0]["spec"]["devices"][:1]
    plan = plan_slices(parsed(existing), devices(4), node=NODE, driver=DRIVER)
    assert len(plan.updates) == 1 and len(plan.updates[0].spec.devices or []) == 4


def test_dynamic_mig_counters_follow_the_server_version_and_a_restart_writes_nothing() -> None:
    inventory, profiles = dynamic_h100()
    published = build_node_devices(inventory, profiles)
    for layout, slices in ((counter_layout_for(1, 34), 8), (counter_layout_for(1, 35), 5)):
        kwargs: dict[str, Any] = {"node": NODE, "driver": DRIVER, "counter_sets": published.counter_sets}
        first = plan_slices([], published.devices, layout=layout, **kwargs)
        assert len(first.creates) == slices, (
            layout
        )  # 1.34: a slice per GPU; 1.35: counters, then 208 devices by 64
        specs = [body["spec"] for body in wire(first.creates)]
        if layout is CounterLayout.V1_35:
            assert not any(s.get("sharedCounters") and s.get("devices") for s in specs)
            assert all(len(s.get("devices") or []) <= 64 for s in specs)
        else:
            assert all(len(s["sharedCounters"]) == 1 and len(s["devices"]) == 26 for s in specs)
        assert plan_slices(parsed(stored(first.creates)), published.devices, layout=layout, **kwargs).empty


def dynamic_h100() -> tuple[NodeInventory, dict[str, tuple[MigProfileInfo, ...]]]:
    backend = simulated_backend("dgx-h100", NODE.name).backend
    empty_mig(backend)
    inventory = backend.read_inventory()
    return inventory, {gpu.uuid: backend.mig_profiles(gpu.index) for gpu in inventory.gpus}
