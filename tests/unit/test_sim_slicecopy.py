"""A copy of a real cluster (cluster/sim/slicecopy.py, readonly.py): a node's published devices give back its
machine, so a simulated node of that machine publishes the same devices; the copy's client can only read."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.cluster.sim.readonly import ReadOnlyKube, ReadOnlyViolation
from gpudra.cluster.sim.slicecopy import CLIQUE_LABEL, machine_of_devices
from gpudra.devices.build import build_devices
from gpudra.errors import ConfigurationError
from gpudra.hardware.gpus.catalog import load_catalog
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.hardware.simulated import FakeNvml
from gpudra.hardware.simulated.profiles import NODE_PROFILES

CATALOG = load_catalog()


def published(nvml: FakeNvml, node: str) -> list[dict[str, Any]]:
    inventory = NvmlBackend(node, nvml).read_inventory()
    return [d.to_wire() for d in build_devices(inventory)]


@pytest.mark.parametrize("profile", sorted(NODE_PROFILES))
def test_a_node_copied_from_its_devices_publishes_the_same_devices(profile: str) -> None:
    original = published(FakeNvml.from_profile(profile, node_name="n", fleet_index=3), "n")
    machine, notes = machine_of_devices("n", original, {}, "gpu.nvidia.com", CATALOG)
    assert notes == []
    assert published(FakeNvml.from_machine(machine), "n") == original


def test_nvidia_driver_slices_with_qualified_names_and_the_clique_label() -> None:
    """NVIDIA's driver publishes no gpudra.dev attributes: the clique comes from the Node's label."""
    devices = published(FakeNvml.from_profile("gb200-nvl72", node_name="t"), "t")
    clique = devices[0]["attributes"]["gpudra.dev/cliqueID"]["string"]
    for device in devices:
        attributes = device["attributes"]
        for key in ("gpudra.dev/cliqueID", "gpudra.dev/nvlinkCount"):
            attributes.pop(key)
        attributes["gpu.nvidia.com/productName"] = attributes.pop("productName")
    machine, _ = machine_of_devices("t", devices, {CLIQUE_LABEL: clique}, "gpu.nvidia.com", CATALOG)
    assert {f"{g.fabric.cluster_uuid}.{g.fabric.clique_id}" for g in machine.gpus if g.fabric} == {clique}
    assert [g.model_id for g in machine.gpus] == ["GB200"] * 4


def test_dynamic_mig_offers_are_left_out_and_unknown_models_refused() -> None:
    devices = published(FakeNvml.from_profile("dgx-a100", node_name="a"), "a")
    offer = {**devices[0], "name": "gpu-0-mig-7g40gb-0-0"}
    offer["attributes"] = {k: v for k, v in devices[0]["attributes"].items() if k != "uuid"}
    machine, notes = machine_of_devices("a", [*devices, offer], {}, "gpu.nvidia.com", CATALOG)
    assert notes == ["a/gpu-0-mig-7g40gb-0-0: a dynamic MIG offer, not an instance; left out"]
    assert len(machine.gpus[0].mig_devices) == 4
    unknown = [
        {**d, "attributes": {**d["attributes"], "productName": {"string": "NVIDIA Z100"}}} for d in devices
    ]
    with pytest.raises(
        ConfigurationError, match="gpu-0 is a 'NVIDIA Z100', which gpudra's GPU catalog does not know"
    ):
        machine_of_devices("a", unknown, {}, "gpu.nvidia.com", CATALOG)


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def list_raw(self, res: object, namespace: str | None = None) -> tuple[list[dict[str, Any]], str]:
        self.calls.append("list")
        return [], "1"


@pytest.mark.parametrize(
    "verb", ["create", "patch", "replace", "delete", "apply_object", "watch", "create_subresource"]
)
async def test_the_copys_client_refuses_every_write(verb: str) -> None:
    recorder = _Recorder()
    # the ignore below: a recorder in place of the client: every call it gets is a failure
    client = ReadOnlyKube(recorder)  # type: ignore[arg-type]
    with pytest.raises(ReadOnlyViolation, match=f"{verb}: the copied cluster is only read"):
        getattr(client, verb)
    # the ignore below: any resource: the copy answers every list the same
    assert await client.list_raw(object()) == []  # type: ignore[arg-type]
    assert recorder.calls == ["list"]
