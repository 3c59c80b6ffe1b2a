"""The fleet summary rows `gpudra status` and `gpudra up` print, from the objects a simulated fleet publishes."""

from __future__ import annotations

from gpudra.api.core import Node
from gpudra.api.dra import DeviceTaint, ResourceClaim, ResourceClaimConsumerReference, ResourceSlice
from gpudra.cluster.fleet import parse_fleet
from gpudra.cluster.simslices import node_objects
from gpudra.planning.summaries import device_users, fleet_rows, slice_device_counts


def fleet(spec: str, *, dynamic_mig: bool = False) -> tuple[list[Node], list[ResourceSlice]]:
    objects = [
        obj
        for node in parse_fleet(spec, {p.split(":")[0] for p in spec.split(",")})
        for obj in node_objects(node, dynamic_mig=dynamic_mig)
    ]
    nodes = [Node.model_validate(o) for o in objects if o["kind"] == "Node"]
    return nodes, [ResourceSlice.model_validate(o) for o in objects if o["kind"] == "ResourceSlice"]


def claim(name: str, *devices: tuple[str, str], driver: str = "gpu.nvidia.com") -> ResourceClaim:
    results = [{"request": "r", "driver": driver, "pool": pool, "device": d} for pool, d in devices]
    return ResourceClaim.model_validate({
        "metadata": {"namespace": "default", "name": name},
        "status": {"allocation": {"devices": {"results": results}}},
    })  # fmt: skip


def test_rows_count_gpus_by_model_and_static_mig_instances_by_profile() -> None:
    nodes, slices = fleet("dgx-a100:1,l4x4:1")
    rows = {r.node: r for r in fleet_rows(nodes, slices, [])}
    a100 = rows["dgx-a100-0"]
    assert a100.gpus == {"NVIDIA A100-SXM4-40GB": 8}
    assert a100.mig_devices == {"1g.5gb": 16, "2g.10gb": 8, "3g.20gb": 8}
    assert a100.mig_text() == ["16x 1g.5gb", "8x 2g.10gb", "8x 3g.20gb"]
    assert rows["l4x4-0"].gpu_text() == ["4x NVIDIA L4"]
    assert rows["l4x4-0"].profile == "l4x4"


def test_dynamic_mig_gpus_are_counted_as_gpus_not_as_instances() -> None:
    nodes, slices = fleet("dgx-a100:1", dynamic_mig=True)
    (row,) = fleet_rows(nodes, slices, [])
    assert row.gpus == {"NVIDIA A100-SXM4-40GB": 8}
    assert row.mig_devices == {}
    assert row.mig_text() == ["dynamic on 8 GPUs"]


def test_allocated_counts_only_this_drivers_devices_and_unhealthy_counts_repelling_taints() -> None:
    nodes, slices = fleet("l4x4:1")
    devices = slices[0].spec.devices or []
    devices[0].taints = [DeviceTaint(key="gpu.nvidia.com/xid", effect="NoSchedule")]
    devices[1].taints = [DeviceTaint(key="gpu.nvidia.com/xid", effect="None")]
    claims = [
        claim("a", ("l4x4-0", "gpu-0"), ("l4x4-0", "gpu-1")),
        claim("b", ("l4x4-0", "channel-0"), driver="compute-domain.nvidia.com"),
        ResourceClaim.model_validate({"metadata": {"namespace": "default", "name": "pending"}}),
    ]
    (row,) = fleet_rows(nodes, slices, claims)
    assert (row.allocated, row.unhealthy, row.devices) == (2, 1, 4)


def test_json_form_has_every_value_in_full() -> None:
    nodes, slices = fleet("dgx-h100:1")
    (row,) = fleet_rows(nodes, slices, [])
    data = row.to_data()
    assert data["node"] == "dgx-h100-0"
    assert data["gpus"] == {"NVIDIA H100 80GB HBM3": 8}
    assert data["slices"] == [slices[0].metadata.name]


def test_the_fleet_gauges_count_a_slices_devices_by_type() -> None:
    _, slices = fleet("dgx-a100:1", dynamic_mig=False)
    node, counts = slice_device_counts(slices[0], "gpu.nvidia.com")
    assert node == slices[0].spec.node_name
    assert sum(counts.values()) == len(slices[0].spec.devices or [])
    assert counts["gpu"] + counts["mig"] == sum(counts.values())
    assert slice_device_counts(slices[0], "compute-domain.nvidia.com") == ("", {})


def test_a_device_is_named_by_the_pods_its_claim_is_reserved_for_or_else_by_the_claim() -> None:
    reserved = claim("train-gpu-x7k2p", ("dgx-h100-0", "gpu-0"))
    assert reserved.status is not None
    reserved.status.reserved_for = [
        ResourceClaimConsumerReference(resource="pods", name="train", uid="u1"),
        ResourceClaimConsumerReference(resource="pods", name="train-2", uid="u2"),
    ]
    alone = claim("spare", ("dgx-h100-0", "gpu-1"))
    other = claim("theirs", ("dgx-h100-0", "gpu-2"), driver="other.example.com")
    assert device_users([reserved, alone, other], "gpu.nvidia.com") == {
        ("dgx-h100-0", "gpu-0"): "train, train-2",
        ("dgx-h100-0", "gpu-1"): "spare",
    }
