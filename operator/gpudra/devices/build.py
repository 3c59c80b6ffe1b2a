"""A node inventory -> the DRA devices the agent publishes, attribute for attribute as NVIDIA's driver does.

What is published (static MIG, as NVIDIA):
- a GPU without MIG, or with MIG capable but off: one ``type="gpu"`` device;
- a GPU with MIG on: only its MIG instances, one ``type="mig"`` device each (never the whole GPU as well);
- a GPU with MIG on and no instances: nothing. ``skipped_gpus`` says which and why, so the agent can log it.

Attributes without a domain sit in the driver's domain (``device.attributes["gpu.nvidia.com"].productName``);
``resource.kubernetes.io/...`` are the Kubernetes standard ones. Version attributes are normalised the way
NVIDIA's driver does it (missing parts become 0, leading zeros go: "9.0" -> "9.0.0",
"580.95.05" -> "580.95.5").

gpudra extensions (full GPUs only, in their own ``gpudra.dev`` domain so that NVIDIA's set stays exact and a
future NVIDIA attribute can never collide; ``build_devices(..., extensions=False)`` leaves them out):
- ``gpudra.dev/nvlinkCount`` (int, always present): active NVLink links of the GPU, 0 without NVLink.
  Select NVLink GPUs with ``device.attributes["gpudra.dev"].nvlinkCount > 0``.
- ``gpudra.dev/cliqueID`` (string, only when the GPU is in an NVLink fabric clique):
  "<clusterUuid>.<cliqueId>", the same value ComputeDomain status uses. Keep a claim inside one NVLink
  domain with ``matchAttribute: gpudra.dev/cliqueID``; test for it with
  ``has(device.attributes["gpudra.dev"].cliqueID)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpudra.api.dra import Device, DeviceAttribute, DeviceCapacity
from gpudra.api.quantity import format_quantity
from gpudra.devices.names import device_sort_key, gpu_device_name, mig_device_name
from gpudra.errors import InvalidInputError
from gpudra.hardware.gpus.inventory import GpuInfo, MigDeviceInfo, NodeInventory

TYPE_GPU = "gpu"
TYPE_MIG = "mig"

STANDARD_DOMAIN = "resource.kubernetes.io"
PCI_BUS_ID = f"{STANDARD_DOMAIN}/pciBusID"
PCIE_ROOT = f"{STANDARD_DOMAIN}/pcieRoot"
NUMA_NODE = f"{STANDARD_DOMAIN}/numaNode"

EXTENSION_DOMAIN = "gpudra.dev"
NVLINK_COUNT = f"{EXTENSION_DOMAIN}/nvlinkCount"
CLIQUE_ID = f"{EXTENSION_DOMAIN}/cliqueID"

SKIP_MIG_WITHOUT_INSTANCES = "MigEnabledWithoutInstances"

_SEMVER = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:-([0-9A-Za-z.-]+))?(?:\+([0-9A-Za-z.-]+))?$")


@dataclass(frozen=True)
class SkippedGpu:
    """A GPU that publishes no device, with the reason (a CamelCase word) and a sentence for the log."""

    minor: int
    uuid: str
    reason: str
    message: str


def semver(text: str) -> str:
    """Normalise a version the way NVIDIA's driver does before publishing it: "12.4" -> "12.4.0"."""
    match = _SEMVER.match(text.strip())
    if match is None:
        raise InvalidInputError(f"{text!r} is not a version (expected forms like 9.0, 12.4 or 580.95.05)")
    major, minor, patch, pre, build = match.groups()
    core = f"{int(major)}.{int(minor or 0)}.{int(patch or 0)}"
    return core + (f"-{pre}" if pre else "") + (f"+{build}" if build else "")


def _string(value: str) -> DeviceAttribute:
    return DeviceAttribute(string=value)


def _version(value: str) -> DeviceAttribute:
    return DeviceAttribute(version=semver(value))


def _int(value: int) -> DeviceAttribute:
    return DeviceAttribute(int_=value)


def _count(value: int) -> DeviceCapacity:
    return DeviceCapacity(value=format_quantity(value))


def _shared_attributes(gpu: GpuInfo, inventory: NodeInventory) -> dict[str, DeviceAttribute]:
    """What a full GPU and each of its MIG devices carry: the model, versions and place on the board."""
    attrs = {
        name: _string(value)
        for name, value in (
            ("productName", gpu.product_name),
            ("brand", gpu.brand),
            ("architecture", gpu.architecture),
        )
        if value is not None  # NVML did not say, or said what cannot be published: left out
    }
    if gpu.cuda_compute_capability is not None:
        attrs["cudaComputeCapability"] = _version(gpu.cuda_compute_capability)
    attrs |= {
        "driverVersion": _version(inventory.driver_version),
        "cudaDriverVersion": _version(inventory.cuda_driver_version),
        PCI_BUS_ID: _string(gpu.pci_bus_id),
    }
    if gpu.pcie_root is not None:
        attrs[PCIE_ROOT] = _string(gpu.pcie_root)
    if gpu.numa_node is not None:
        attrs[NUMA_NODE] = _int(gpu.numa_node)
    if gpu.addressing_mode is not None:
        attrs["addressingMode"] = _string(gpu.addressing_mode)
    return attrs


def gpu_device(gpu: GpuInfo, inventory: NodeInventory, *, extensions: bool = True) -> Device:
    """The ``gpu-<minor>`` device of a whole GPU."""
    attrs = {"type": _string(TYPE_GPU), "uuid": _string(gpu.uuid), **_shared_attributes(gpu, inventory)}
    if extensions:
        attrs[NVLINK_COUNT] = _int(gpu.nvlink_count)
        clique = gpu.fabric.clique if gpu.fabric is not None else None
        if clique is not None:
            attrs[CLIQUE_ID] = _string(clique)
    return Device(
        name=gpu_device_name(gpu.minor),
        attributes=attrs,
        capacity={} if gpu.memory_bytes is None else {"memory": _count(gpu.memory_bytes)},
    )


def mig_attributes(
    gpu: GpuInfo, mig: MigDeviceInfo, inventory: NodeInventory, *, with_uuid: bool = True
) -> dict[str, DeviceAttribute]:
    """A MIG device's attributes; a dynamic MIG device (not created yet) has no ``uuid``."""
    attrs = {"type": _string(TYPE_MIG)}
    if with_uuid:
        attrs["uuid"] = _string(mig.uuid)
    attrs |= {"parentUUID": _string(gpu.uuid), "profile": _string(mig.profile)}
    return attrs | _shared_attributes(gpu, inventory)


def mig_capacity(mig: MigDeviceInfo, *, memory_slices: bool = True) -> dict[str, DeviceCapacity]:
    """A MIG device's capacities; static MIG devices also name their memory slices (``memorySlice<i>: 1``)."""
    capacity = {
        "multiprocessors": _count(mig.multiprocessors),
        "copyEngines": _count(mig.copy_engines),
        "decoders": _count(mig.decoders),
        "encoders": _count(mig.encoders),
        "jpegEngines": _count(mig.jpeg_engines),
        "ofaEngines": _count(mig.ofa_engines),
        "memory": _count(mig.memory_bytes),
    }
    if memory_slices:
        for slice_index in range(mig.placement_start, mig.placement_start + mig.placement_size):
            capacity[f"memorySlice{slice_index}"] = _count(1)
    return capacity


def mig_device(gpu: GpuInfo, mig: MigDeviceInfo, inventory: NodeInventory) -> Device:
    """The device of one existing MIG instance of ``gpu``."""
    return Device(
        name=mig_device_name(gpu.minor, mig.profile, mig.gi_profile_id, mig.placement_start),
        attributes=mig_attributes(gpu, mig, inventory),
        capacity=mig_capacity(mig),
    )


def devices_of_gpu(gpu: GpuInfo, inventory: NodeInventory, *, extensions: bool = True) -> list[Device]:
    """The devices one GPU publishes: itself, or its MIG instances when MIG is on (possibly none)."""
    if gpu.mig_enabled:
        return [mig_device(gpu, mig, inventory) for mig in gpu.mig_devices]
    return [gpu_device(gpu, inventory, extensions=extensions)]


def build_devices(inventory: NodeInventory, *, extensions: bool = True) -> list[Device]:
    """Every device of the node, in natural name order (gpu-2 before gpu-10; small MIG profiles first).

    Raises InvalidInputError when two devices would get the same name (a malformed inventory) or a version
    string cannot be read.
    """
    devices = [
        device for gpu in inventory.gpus for device in devices_of_gpu(gpu, inventory, extensions=extensions)
    ]
    return in_name_order(devices, inventory.node_name)


def in_name_order(devices: list[Device], node_name: str) -> list[Device]:
    """``devices`` sorted by name; InvalidInputError when two share a name."""
    devices = sorted(devices, key=lambda device: device_sort_key(device.name))
    seen: set[str] = set()
    for device in devices:
        if device.name in seen:
            raise InvalidInputError(f"two devices on node {node_name} are both named {device.name}")
        seen.add(device.name)
    return devices


def skipped_gpus(inventory: NodeInventory) -> list[SkippedGpu]:
    """GPUs that publish nothing, ordered by minor: today only MIG-enabled GPUs without MIG instances."""
    skipped = [
        SkippedGpu(
            minor=gpu.minor,
            uuid=gpu.uuid,
            reason=SKIP_MIG_WITHOUT_INSTANCES,
            message=(
                f"{gpu_device_name(gpu.minor)} ({gpu.uuid}) has MIG mode enabled but no MIG instances, so it "
                "offers no device; create instances (a MigLayout or nvidia.com/mig.config) or disable MIG"
            ),
        )
        for gpu in inventory.gpus
        if gpu.mig_enabled and not gpu.mig_devices
    ]
    return sorted(skipped, key=lambda s: s.minor)
