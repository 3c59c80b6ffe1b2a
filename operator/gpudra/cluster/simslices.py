"""The objects a simulated node would put in the cluster, computed without running its agent: its Node and the
ResourceSlices the agent would publish (static MIG as the profile's hardware has it, or dynamic MIG). For
benchmarks and tests of the views over large fleets, where running hundreds of agents would measure the agents."""

from __future__ import annotations

from typing import Any

from gpudra.cluster.fleet import FleetNode, node_object
from gpudra.devices import CounterLayout, build_node_devices, build_slice_specs
from gpudra.hardware.simulated import empty_mig, simulated_backend


def node_objects(
    node: FleetNode, *, dynamic_mig: bool = False, driver: str = "gpu.nvidia.com"
) -> list[dict[str, Any]]:
    """The Node and its ResourceSlices (wire form, with names and resourceVersions as a server would set)."""
    backend = simulated_backend(node.profile, node.name, node.fleet_index).backend
    if dynamic_mig:
        empty_mig(backend)
    inventory = backend.read_inventory()
    dynamic = (
        {g.uuid: backend.mig_profiles(g.index) for g in inventory.gpus if g.mig_capable}
        if dynamic_mig
        else {}
    )
    devices = build_node_devices(inventory, dynamic)
    specs = build_slice_specs(
        node_name=node.name,
        driver=driver,
        devices=devices.devices,
        generation=1,
        layout=CounterLayout.V1_34,
        counter_sets=devices.counter_sets,
    )
    slices = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {
                "name": f"{node.name}-{driver}-{i}",
                "resourceVersion": "1",
                "uid": f"{node.name}-{i}",
            },
            "spec": spec.model_dump(mode="json", by_alias=True, exclude_none=True),
        }
        for i, spec in enumerate(specs)
    ]
    node_body = node_object(node)
    node_body["metadata"].update({"resourceVersion": "1", "uid": node.name})
    return [node_body, *slices]
