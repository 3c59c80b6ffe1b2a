"""Parsed ResourceSlices share one instance of each equal device attribute and capacity (every parse of a fleet's
slices in one process: the agents', the stand-in scheduler's, the controller's), and nobody can change a shared one.
"""

from __future__ import annotations

import gc

import pytest
from pydantic import ValidationError

from gpudra.api.dra import DeviceAttribute, DeviceCapacity, ResourceSlice
from gpudra.api.interning import Interner
from gpudra.api.meta import ObjectMeta


def _slice(node: str, uuid: str) -> ResourceSlice:
    return ResourceSlice.model_validate({
        "metadata": {"name": f"{node}-gpu.nvidia.com"},
        "spec": {
            "driver": "gpu.nvidia.com", "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{
                "name": "gpu-0",
                "attributes": {
                    "productName": {"string": "NVIDIA H100 80GB HBM3"}, "uuid": {"string": uuid},
                    "index": {"int": 1}, "mig": {"bool": True}, "driverVersion": {"version": "580.65.6"},
                    "peers": {"strings": ["u1", "u2"]},
                },
                "capacity": {"memory": {"value": "80Gi"}},
            }],
        },
    })  # fmt: skip


def _device_values(slice_: ResourceSlice) -> tuple[dict[str, DeviceAttribute], dict[str, DeviceCapacity]]:
    device = (slice_.spec.devices or [])[0]
    return device.attributes or {}, device.capacity or {}


def test_two_nodes_slices_share_their_equal_attributes_and_capacities() -> None:
    (first, first_capacity), (second, second_capacity) = (
        _device_values(_slice("node-1", "GPU-1")),
        _device_values(_slice("node-2", "GPU-2")),
    )
    for name in ("productName", "index", "mig", "driverVersion"):
        assert first[name] is second[name], name
    assert first_capacity["memory"] is second_capacity["memory"]
    assert first["uuid"].value == "GPU-1" and second["uuid"].value == "GPU-2"
    # a list could be changed in place: each device keeps its own
    assert first["peers"] is not second["peers"] and first["peers"].values == ("u1", "u2")
    # equal values of different kinds stay apart (True == 1 in Python)
    assert first["index"].kind == "int" and first["mig"].kind == "bool"
    # what is sent is what was read
    assert _slice("node-2", "GPU-2").to_wire()["spec"]["devices"][0]["attributes"]["index"] == {"int": 1}


def test_a_shared_value_cannot_be_changed_by_one_of_its_holders() -> None:
    attributes, capacity = _device_values(_slice("node-1", "GPU-1"))
    with pytest.raises(ValidationError, match="frozen"):
        attributes["productName"].string = "changed"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        capacity["memory"].value = "1Gi"  # type: ignore[misc]
    assert _device_values(_slice("node-2", "GPU-2"))[0]["productName"].value == "NVIDIA H100 80GB HBM3"


def test_the_table_forgets_a_value_nobody_holds() -> None:
    table = Interner(DeviceAttribute)
    first = table.interned("k", DeviceAttribute(string="a"))
    assert table.interned("k", DeviceAttribute(string="a")) is first and len(table) == 1
    del first
    gc.collect()
    assert len(table) == 0


def test_only_frozen_models_can_be_shared() -> None:
    with pytest.raises(TypeError, match="ObjectMeta is not"):
        Interner(ObjectMeta)
