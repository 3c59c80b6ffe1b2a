"""The device metadata format (KEP-5304) against k8s.io/dynamic-resource-allocation v0.37's kubelet-plugin helper:
paths on the host and in the container, the DeviceMetadata object, and the attributes of GPUs and MIG devices."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.api.dra import DeviceAttribute
from gpudra.devices.metadata import (
    ClaimIdentity,
    MetadataDevice,
    container_file,
    device_attributes,
    device_metadata,
    host_file,
    sharing_attributes,
)
from gpudra.devices.names import mig_device_name
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.hardware.simulated import simulated_backend
from gpudra.hardware.simulated.fake_nvml import FakeNvml

DIRECT = ClaimIdentity("team-a", "shared-gpu", "c-1")
FROM_TEMPLATE = ClaimIdentity("team-a", "infer-gpu-x7k2p", "c-2", pod_claim_name="gpu")


@pytest.mark.parametrize(
    ("claim", "request_name", "host", "container"),
    [
        (DIRECT, "gpu", "dra-device-metadata/team-a_shared-gpu/gpu/metadata.json",
         "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/shared-gpu/gpu/gpu.nvidia.com-metadata.json"),
        (FROM_TEMPLATE, "gpu", "dra-device-metadata/team-a_infer-gpu-x7k2p/gpu/metadata.json",
         "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpu/gpu/gpu.nvidia.com-metadata.json"),
        (DIRECT, "gpu/large", "dra-device-metadata/team-a_shared-gpu/gpu/metadata.json",  # subrequest: base name
         "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/shared-gpu/gpu/gpu.nvidia.com-metadata.json"),
    ],
)  # fmt: skip
def test_paths_on_the_host_and_in_the_container(
    claim: ClaimIdentity, request_name: str, host: str, container: str
) -> None:
    assert host_file(claim, request_name) == host
    assert container_file("gpu.nvidia.com", claim, request_name) == container


def _attr(**value: Any) -> DeviceAttribute:
    return DeviceAttribute.model_validate(value)


@pytest.mark.parametrize(
    ("claim", "request_name", "devices", "expected"),
    [
        (
            DIRECT, "gpu",
            [MetadataDevice("gpu.nvidia.com", "node-a", "gpu-0", {
                "uuid": _attr(string="GPU-1"), "resource.kubernetes.io/pciBusID": _attr(string="0000:18:00.0"),
                "driverVersion": _attr(version="580.65.6"), "gpudra.dev/migPlacementStart": _attr(int=2),
            })],
            {
                "apiVersion": "metadata.resource.k8s.io/v1alpha1", "kind": "DeviceMetadata",
                "metadata": {"name": "shared-gpu", "namespace": "team-a", "uid": "c-1", "generation": 1},
                "requests": [{"name": "gpu", "devices": [{
                    "driver": "gpu.nvidia.com", "pool": "node-a", "name": "gpu-0",
                    "attributes": {
                        "driverVersion": {"version": "580.65.6"},
                        "gpudra.dev/migPlacementStart": {"int": 2},
                        "resource.kubernetes.io/pciBusID": {"string": "0000:18:00.0"},
                        "uuid": {"string": "GPU-1"},
                    },
                }]}],
            },
        ),
        (
            FROM_TEMPLATE, "gpu/large", [MetadataDevice("gpu.nvidia.com", "node-a", "gpu-1", {})],
            {
                "apiVersion": "metadata.resource.k8s.io/v1alpha1", "kind": "DeviceMetadata",
                "metadata": {"name": "infer-gpu-x7k2p", "namespace": "team-a", "uid": "c-2", "generation": 1},
                "podClaimName": "gpu",
                "requests": [{"name": "gpu/large", "devices": [
                    {"driver": "gpu.nvidia.com", "pool": "node-a", "name": "gpu-1"},
                ]}],
            },
        ),
        (
            DIRECT, "gpu", [],
            {
                "apiVersion": "metadata.resource.k8s.io/v1alpha1", "kind": "DeviceMetadata",
                "metadata": {"name": "shared-gpu", "namespace": "team-a", "uid": "c-1", "generation": 1},
                "requests": [{"name": "gpu"}],
            },
        ),
    ],
)  # fmt: skip
def test_the_device_metadata_object(
    claim: ClaimIdentity, request_name: str, devices: list[MetadataDevice], expected: dict[str, Any]
) -> None:
    assert device_metadata(claim, request_name, devices) == expected


def _inventory(profile: str) -> Any:
    return NvmlBackend("node-a", nvml=FakeNvml.from_profile(profile, node_name="node-a")).read_inventory()


def test_a_gpu_carries_its_published_attributes() -> None:
    inventory = _inventory("dgx-h100")
    gpu = inventory.gpus[3]
    attributes = {k: v.to_wire() for k, v in device_attributes(inventory, "gpu-3").items()}
    assert attributes["uuid"] == {"string": gpu.uuid}
    assert attributes["resource.kubernetes.io/pciBusID"] == {"string": gpu.pci_bus_id}
    assert attributes["type"] == {"string": "gpu"}
    assert attributes["productName"] == {"string": gpu.product_name}
    assert device_attributes(inventory, "gpu-99") == {}


def test_a_mig_device_carries_its_profile_parent_and_placement() -> None:
    inventory = _inventory("dgx-a100")
    gpu = next(g for g in inventory.gpus if g.mig_devices)
    mig = gpu.mig_devices[-1]
    name = mig_device_name(gpu.minor, mig.profile, mig.gi_profile_id, mig.placement_start)
    attributes = {k: v.to_wire() for k, v in device_attributes(inventory, name).items()}
    assert attributes["uuid"] == {"string": mig.uuid}
    assert attributes["parentUUID"] == {"string": gpu.uuid}
    assert attributes["profile"] == {"string": mig.profile}
    assert attributes["resource.kubernetes.io/pciBusID"] == {"string": gpu.pci_bus_id}
    assert attributes["gpudra.dev/migPlacementStart"] == {"int": mig.placement_start}
    assert attributes["gpudra.dev/migPlacementSize"] == {"int": mig.placement_size}


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
          "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}},
         {"gpudra.dev/sharingStrategy": {"string": "TimeSlicing"}, "gpudra.dev/timeSliceInterval": {"string": "Long"}}),
        ({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
          "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50,
                                                       "defaultPinnedDeviceMemoryLimit": "10Gi"}}},
         {"gpudra.dev/sharingStrategy": {"string": "MPS"}, "gpudra.dev/mpsActiveThreadPercentage": {"int": 50},
          "gpudra.dev/mpsPinnedMemoryLimit": {"string": "10Gi"}}),
        ({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "MigDeviceConfig",
          "sharing": {"strategy": "TimeSlicing"}},
         {"gpudra.dev/sharingStrategy": {"string": "TimeSlicing"}}),
        ({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}, {}),
    ],
)  # fmt: skip
def test_sharing_settings_as_attributes(config: dict[str, Any], expected: dict[str, Any]) -> None:
    assert {k: v.to_wire() for k, v in sharing_attributes(config).items()} == expected


def test_a_passthrough_device_carries_the_pci_function_a_vm_is_given() -> None:
    backend = simulated_backend("dgx-h100", "node-a").backend
    inventory, pci = backend.read_inventory(), backend.pci_gpus()
    first = min(pci, key=lambda gpu: gpu.pci_bus_id)
    attributes = {k: v.to_wire() for k, v in device_attributes(inventory, "gpu-vfio-0", None, pci).items()}
    assert attributes["type"] == {"string": "vfio"}
    assert attributes["resource.kubernetes.io/pciBusID"] == {"string": first.pci_bus_id}
    assert device_attributes(inventory, "gpu-vfio-0") == {}  # passthrough off: no such device
