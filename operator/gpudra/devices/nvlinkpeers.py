"""``gpudra.dev/nvlinkPeers``: a list-typed attribute (Kubernetes' DRAListTypeAttributes, alpha in 1.36) naming the
GPUs a full GPU reaches over NVLink.

The value is a ``strings`` list of GPU UUIDs: the GPU's own and those of its NVLink peers on the node. Including
the GPU itself makes the list the GPU's NVLink island as seen from it, so:
- ``device.attributes["gpudra.dev"].nvlinkPeers.includes("GPU-...")`` selects that GPU and the GPUs linked to it;
- ``matchAttribute: gpudra.dev/nvlinkPeers`` (a value common to every chosen device) keeps a claim's GPUs within
  the reach of one GPU: on an NVSwitch board any GPUs of the node, with bridged pairs the two GPUs of one pair.
A GPU without NVLink carries a list of one (itself).

Only full GPUs (``type=gpu``) carry it. MIG devices do not: NVIDIA's MIG does not support peer-to-peer between
GPU instances, over NVLink or PCIe, so a MIG device has no NVLink peer a workload could use, and publishing its
parent's peers would promise one. Passthrough devices do not either (a VM's view of NVLink is its own).

Kubernetes counts list items against the per-device bound of 48 attribute values (scalars count one each); an
attribute that would push a device past it is left out, so the device is still published.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpudra.api.dra import Device, DeviceAttribute
from gpudra.devices.build import EXTENSION_DOMAIN, TYPE_GPU
from gpudra.hardware.gpus.inventory import NodeInventory

NVLINK_PEERS = f"{EXTENSION_DOMAIN}/nvlinkPeers"
MAX_ATTRIBUTE_VALUES = (
    48  # Kubernetes' ResourceSliceMaxAttributeValuesPerDevice: scalars and list items together
)


def value_count(device: Device) -> int:
    """The attribute values of ``device`` as Kubernetes counts them: one per scalar, one per list item."""
    count = 0
    for attribute in (device.attributes or {}).values():
        items = attribute.ints or attribute.bools or attribute.strings or attribute.versions
        count += len(items) if attribute.is_list and items else 1
    return count


def with_nvlink_peers(devices: Sequence[Device], inventory: NodeInventory) -> list[Device]:
    """``devices`` (any order, kept) with ``gpudra.dev/nvlinkPeers`` added to each full GPU device of
    ``inventory``'s GPUs, unless it would make the device hold more than 48 attribute values."""
    islands = {gpu.uuid: sorted({gpu.uuid, *gpu.nvlink_peers}) for gpu in inventory.gpus}
    published = []
    for device in devices:
        attributes = device.attributes or {}
        kind, gpu_uuid = attributes.get("type"), attributes.get("uuid")
        island = islands.get(gpu_uuid.string or "") if gpu_uuid is not None else None
        if kind is None or kind.string != TYPE_GPU or island is None:
            published.append(device)
            continue
        if value_count(device) + len(island) > MAX_ATTRIBUTE_VALUES:
            published.append(device)
            continue
        peers = {NVLINK_PEERS: DeviceAttribute(strings=island)}
        published.append(device.model_copy(update={"attributes": {**attributes, **peers}}))
    return published
