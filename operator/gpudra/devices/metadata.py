"""Device metadata (KEP-5304): what a container can read about the devices of its claim, as
``metadata.resource.k8s.io/v1alpha1`` DeviceMetadata objects, the format of k8s.io/dynamic-resource-allocation's
kubelet-plugin helper (v0.37: api/metadata, kubeletplugin/metadata.go). Pure: paths and documents, no I/O.

One file per claim and request, ``metadata.json`` under the plugin's data directory at
``dra-device-metadata/<claim namespace>_<claim name>/<request>/``, bind-mounted read-only into the containers at
``/var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim name>/<request>/<driver>-metadata.json``
(``resourceclaimtemplates/<pod's name for the claim>/...`` for a claim made from a template, which carries that
name in its ``resource.kubernetes.io/pod-claim-name`` annotation). The file is a stream of JSON objects, one per
API version written, newest first; only v1alpha1 exists so far.

Each device carries the attributes its ResourceSlice publishes (UUID, ``resource.kubernetes.io/pciBusID``, model,
versions, MIG ``profile`` and ``parentUUID``), and what only prepare knows: a MIG device's placement on its GPU and
the sharing it was prepared with (``gpudra.dev/...``).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpudra.api.dra import DeviceAttribute
from gpudra.api.nvidia import GpuConfig, MigDeviceConfig, MpsConfig
from gpudra.devices.build import EXTENSION_DOMAIN, gpu_device, mig_attributes
from gpudra.devices.names import gpu_device_name, mig_device_name, vfio_device_name
from gpudra.devices.passthrough import in_pci_order, vfio_device
from gpudra.hardware.gpus.inventory import NodeInventory, PciGpu

API_VERSION = "metadata.resource.k8s.io/v1alpha1"
KIND = "DeviceMetadata"
CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
HOST_SUBDIR = "dra-device-metadata"
FILE_NAME = "metadata.json"

MIG_PLACEMENT_START = f"{EXTENSION_DOMAIN}/migPlacementStart"
MIG_PLACEMENT_SIZE = f"{EXTENSION_DOMAIN}/migPlacementSize"
SHARING_STRATEGY = f"{EXTENSION_DOMAIN}/sharingStrategy"
TIME_SLICE_INTERVAL = f"{EXTENSION_DOMAIN}/timeSliceInterval"
MPS_ACTIVE_THREAD_PERCENTAGE = f"{EXTENSION_DOMAIN}/mpsActiveThreadPercentage"
MPS_PINNED_MEMORY_LIMIT = f"{EXTENSION_DOMAIN}/mpsPinnedMemoryLimit"


@dataclass(frozen=True, slots=True)
class ClaimIdentity:
    namespace: str
    name: str
    uid: str
    pod_claim_name: str | None = None
    """The pod's name for a claim made from a template (its ``resource.kubernetes.io/pod-claim-name``)."""


@dataclass(frozen=True, slots=True)
class MetadataDevice:
    driver: str
    pool: str
    name: str
    attributes: Mapping[str, DeviceAttribute]


def base_request(request: str) -> str:
    """``gpu/large`` (a subrequest of firstAvailable) -> ``gpu``."""
    return request.split("/", 1)[0]


def claim_dir(claim: ClaimIdentity) -> str:
    """The claim's directory, relative to the plugin's data directory."""
    return posixpath.join(HOST_SUBDIR, f"{claim.namespace}_{claim.name}")


def host_file(claim: ClaimIdentity, request: str) -> str:
    """A request's metadata file, relative to the plugin's data directory."""
    return posixpath.join(claim_dir(claim), base_request(request), FILE_NAME)


def container_file(driver: str, claim: ClaimIdentity, request: str) -> str:
    """Where the containers find a request's metadata file."""
    if claim.pod_claim_name:
        where = posixpath.join("resourceclaimtemplates", claim.pod_claim_name)
    else:
        where = posixpath.join("resourceclaims", claim.name)
    return posixpath.join(CONTAINER_DIR, where, base_request(request), f"{driver}-metadata.json")


def device_metadata(
    claim: ClaimIdentity, request: str, devices: Sequence[MetadataDevice], *, generation: int = 1
) -> dict[str, Any]:
    """The DeviceMetadata object of one request (``request`` as the allocation names it, subrequest included)."""
    meta: dict[str, Any] = {
        "name": claim.name,
        "namespace": claim.namespace,
        "uid": claim.uid,
        "generation": generation,
    }
    document: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta}
    if claim.pod_claim_name:
        document["podClaimName"] = claim.pod_claim_name
    entry: dict[str, Any] = {"name": request}
    if devices:
        entry["devices"] = [_device(d) for d in devices]
    document["requests"] = [entry]
    return document


def _device(device: MetadataDevice) -> dict[str, Any]:
    body: dict[str, Any] = {"driver": device.driver, "pool": device.pool, "name": device.name}
    if device.attributes:
        body["attributes"] = {k: v.to_wire() for k, v in sorted(device.attributes.items())}
    return body


def device_attributes(
    inventory: NodeInventory,
    device_name: str,
    config: Mapping[str, Any] | None = None,
    pci_gpus: Sequence[PciGpu] = (),
) -> dict[str, DeviceAttribute]:
    """The published attributes of a device of the node (a MIG device also its placement; a passthrough device
    those of its PCI function, among ``pci_gpus``), and the sharing of its effective opaque config (wire form;
    None: no sharing); empty when the node has no such device."""
    attributes: dict[str, DeviceAttribute] = {}
    for index, pci in enumerate(in_pci_order(pci_gpus)):
        if device_name == vfio_device_name(index):
            return dict(vfio_device(pci, index).attributes or {})
    for gpu in inventory.gpus:
        if device_name == gpu_device_name(gpu.minor):
            attributes = dict(gpu_device(gpu, inventory).attributes or {})
        for mig in gpu.mig_devices:
            if device_name == mig_device_name(gpu.minor, mig.profile, mig.gi_profile_id, mig.placement_start):
                attributes = mig_attributes(gpu, mig, inventory) | {
                    MIG_PLACEMENT_START: _int(mig.placement_start),
                    MIG_PLACEMENT_SIZE: _int(mig.placement_size),
                }
    if attributes and config is not None:
        attributes |= sharing_attributes(config)
    return attributes


def sharing_attributes(config: Mapping[str, Any]) -> dict[str, DeviceAttribute]:
    """A GpuConfig's or MigDeviceConfig's sharing (wire form, as prepare applied it) as attributes."""
    parsed = (GpuConfig if config.get("kind") == "GpuConfig" else MigDeviceConfig).model_validate(config)
    sharing = parsed.sharing
    if sharing is None:
        return {}
    attributes = {SHARING_STRATEGY: _string(sharing.strategy)}
    slicing = getattr(sharing, "time_slicing_config", None)
    if slicing is not None and slicing.interval is not None:
        attributes[TIME_SLICE_INTERVAL] = _string(slicing.interval)
    mps: MpsConfig | None = sharing.mps_config
    if mps is not None:
        if mps.default_active_thread_percentage is not None:
            attributes[MPS_ACTIVE_THREAD_PERCENTAGE] = _int(mps.default_active_thread_percentage)
        if mps.default_pinned_device_memory_limit is not None:
            attributes[MPS_PINNED_MEMORY_LIMIT] = _string(str(mps.default_pinned_device_memory_limit))
    return attributes


def _int(value: int) -> DeviceAttribute:
    return DeviceAttribute(int_=value)


def _string(value: str) -> DeviceAttribute:
    return DeviceAttribute(string=value)
