"""The one way product code reads a device's attribute, a node-local allocation's node and a claim's key."""

from __future__ import annotations

from gpudra.api.dra import AllocationResult, Device, DeviceTaint, ResourceClaim


def test_an_attribute_reads_as_text_whatever_its_kind() -> None:
    device = Device.model_validate({
        "name": "gpu-0",
        "attributes": {
            "type": {"string": "gpu"}, "index": {"int": 0}, "mig": {"bool": False},
            "driverVersion": {"version": "580.65.6"}, "gpudra.dev/nvlinkPeers": {"strings": ["u1", "u2"]},
        },
        "taints": [{"key": "k", "effect": "None"}],
    })  # fmt: skip
    text = device.attribute_text
    assert (text("type"), text("index"), text("mig"), text("driverVersion")) == (
        "gpu",
        "0",
        "False",
        "580.65.6",
    )
    assert text("gpudra.dev/nvlinkPeers") == "u1,u2"
    assert text("productName") == ""
    assert not device.repels_claims  # an informational taint does not repel
    repelling = DeviceTaint(key="xid", effect="NoSchedule")
    assert device.model_copy(update={"taints": [*(device.taints or []), repelling]}).repels_claims


def test_the_node_of_an_allocation_and_the_key_of_a_claim() -> None:
    local = AllocationResult.model_validate({
        "devices": {"results": [{"request": "r", "driver": "d", "pool": "n1", "device": "gpu-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]},
    })  # fmt: skip
    assert local.node == "n1" and [r.device for r in local.results] == ["gpu-0"]
    assert AllocationResult().node is None and AllocationResult().results == []
    claim = ResourceClaim.model_validate(
        {"metadata": {"name": "c"}, "status": {"allocation": local.to_wire()}}
    )
    assert claim.metadata.namespaced_name == "default/c" and claim.allocation == local
