"""Pure: a node's hardware inventory -> DRA devices -> ResourceSlice specs, under NVIDIA's names.

No I/O and no awaits (``classes`` reads one file shipped inside this package). Modules:
``names`` (device names and their order), ``build`` (devices from an inventory), ``slices`` (devices split
into ResourceSlice specs), ``summary`` (counts for tables and metrics), ``classes`` (the DeviceClasses).
"""

from gpudra.devices.build import (
    CLIQUE_ID,
    EXTENSION_DOMAIN,
    NUMA_NODE,
    NVLINK_COUNT,
    PCI_BUS_ID,
    PCIE_ROOT,
    TYPE_GPU,
    TYPE_MIG,
    build_devices,
)
from gpudra.devices.classes import load_device_classes
from gpudra.devices.dynamic import DynamicMemo, build_node_devices
from gpudra.devices.listprobe import ListSupport, probe_slice, support_from_answer, support_from_refusal
from gpudra.devices.metadata import (
    POD_CLAIM_NAME_ANNOTATION,
    ClaimIdentity,
    MetadataDevice,
    base_request,
    claim_dir,
    container_file,
    device_attributes,
    device_metadata,
    host_file,
)
from gpudra.devices.names import gpu_device_name, mig_device_name, parse_mig_device_name, vfio_device_name
from gpudra.devices.offer import (
    GpuTaints,
    NodeState,
    OfferSettings,
    device_names,
    device_taints,
    node_offer,
    parent_uuid,
)
from gpudra.devices.passthrough import in_pci_order, passthrough_uuid
from gpudra.devices.slices import CounterLayout, build_slice_specs, counter_layout_for

__all__ = [
    "CLIQUE_ID",
    "EXTENSION_DOMAIN",
    "NUMA_NODE",
    "NVLINK_COUNT",
    "PCIE_ROOT",
    "PCI_BUS_ID",
    "POD_CLAIM_NAME_ANNOTATION",
    "TYPE_GPU",
    "TYPE_MIG",
    "ClaimIdentity",
    "CounterLayout",
    "DynamicMemo",
    "GpuTaints",
    "ListSupport",
    "MetadataDevice",
    "NodeState",
    "OfferSettings",
    "base_request",
    "build_devices",
    "build_node_devices",
    "build_slice_specs",
    "claim_dir",
    "container_file",
    "counter_layout_for",
    "device_attributes",
    "device_metadata",
    "device_names",
    "device_taints",
    "gpu_device_name",
    "host_file",
    "in_pci_order",
    "load_device_classes",
    "mig_device_name",
    "node_offer",
    "parent_uuid",
    "parse_mig_device_name",
    "passthrough_uuid",
    "probe_slice",
    "support_from_answer",
    "support_from_refusal",
    "vfio_device_name",
]
