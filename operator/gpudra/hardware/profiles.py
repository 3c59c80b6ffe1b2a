"""Node profiles: what a simulated machine holds (which GPUs, where on the PCIe tree, MIG state, NVLink
fabric).

A profile plus a node name (and, for multi-node NVLink systems, the node's position in the fleet) fully
determines a simulated node: UUIDs are derived from the node name, PCI addresses and NUMA nodes come from the
profile, the way every real machine of one type shares the same PCIe layout."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from gpudra.errors import ConfigurationError

# Namespace of every UUID the simulation derives (GPU, MIG, fabric cluster).
SIMULATION_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "simulated.gpudra.dev")

FABRIC_STATE_COMPLETED = 3  # NVML_GPU_FABRIC_STATE_COMPLETED
FABRIC_STATUS_SUCCESS = 0  # NVML_SUCCESS
NVL72_TRAYS_PER_RACK = 18
NVL72_CLIQUE_ID = 32766  # [unverified] the clique id a rack reports without fabric partitions


class FabricKind(Enum):
    UNSUPPORTED = "unsupported"  # nvmlDeviceGetGpuFabricInfoV raises NOT_SUPPORTED (Ampere, PCIe cards)
    NO_CLIQUE = "no-clique"  # HGX H100/H200/B200: state COMPLETED, status SUCCESS, all-zero cluster UUID
    NVL72 = "nvl72"  # GB200 NVL72: one cluster UUID per rack of 18 compute trays


@dataclass(frozen=True)
class GpuSlot:
    """Where one GPU sits in the machine."""

    pci_bus_id: str  # "0000:1b:00.0"
    numa_node: int | None  # None: NVML answers NOT_SUPPORTED (a VM, as recorded)
    pcie_root: str  # "pci0000:15"


@dataclass(frozen=True)
class FabricReading:
    """What nvmlDeviceGetGpuFabricInfoV reports for every GPU of the node."""

    cluster_uuid: str
    clique_id: int
    state: int
    status: int


@dataclass(frozen=True)
class NodeProfile:
    name: str
    model_id: str  # key of the GPU catalog
    slots: tuple[GpuSlot, ...]
    mig_enabled: bool = False
    # (profile name, placement start) of the MIG devices every GPU starts with; needs mig_enabled
    mig_layout: tuple[tuple[str, int], ...] = ()
    fabric: FabricKind = FabricKind.UNSUPPORTED
    addressing_mode: str | None = None  # "HMM" | "ATS" | None (nvmlDeviceGetAddressingMode NOT_SUPPORTED)
    driver_version: str = "580.95.05"
    cuda_driver_version: int = 13000  # nvmlSystemGetCudaDriverVersion: 1000 * major + 10 * minor
    description: str = ""

    @property
    def gpu_count(self) -> int:
        return len(self.slots)

    def fabric_reading(self, fleet_index: int = 0) -> FabricReading | None:
        """The fabric info of this node's GPUs; ``fleet_index`` is the node's position in the fleet."""
        if self.fabric is FabricKind.UNSUPPORTED:
            return None
        if self.fabric is FabricKind.NO_CLIQUE:
            return FabricReading(str(uuid.UUID(int=0)), 0, FABRIC_STATE_COMPLETED, FABRIC_STATUS_SUCCESS)
        rack = fleet_index // NVL72_TRAYS_PER_RACK
        cluster = uuid.uuid5(SIMULATION_NAMESPACE, f"{self.name}/rack/{rack}")
        return FabricReading(str(cluster), NVL72_CLIQUE_ID, FABRIC_STATE_COMPLETED, FABRIC_STATUS_SUCCESS)


def _slots(
    bus_numbers: tuple[int, ...], roots: tuple[int, ...], numa: tuple[int, ...], domain: int = 0
) -> tuple[GpuSlot, ...]:
    return tuple(
        GpuSlot(f"{domain:04x}:{bus:02x}:00.0", node, f"pci{domain:04x}:{root:02x}")
        for bus, root, node in zip(bus_numbers, roots, numa, strict=True)
    )


_EIGHT_NUMA = (0, 0, 0, 0, 1, 1, 1, 1)
# DGX/HGX H100, H200 and B200 boards share one PCIe layout: one switch per GPU, half the GPUs per socket.
_HGX_HOPPER_SLOTS = _slots(
    (0x1B, 0x43, 0x52, 0x61, 0x9D, 0xC3, 0xD1, 0xDF),
    (0x15, 0x3D, 0x4E, 0x5D, 0x97, 0xBD, 0xCC, 0xDA),
    _EIGHT_NUMA,
)
_DGX_A100_SLOTS = _slots(
    (0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD),
    (0x00, 0x00, 0x40, 0x40, 0x80, 0x80, 0xB0, 0xB0),
    _EIGHT_NUMA,
)
_FOUR_PCIE_SLOTS = _slots((0x01, 0x21, 0x81, 0xA1), (0x00, 0x20, 0x80, 0xA0), (0, 0, 1, 1))

# mig-parted all-balanced on A100-40GB (1g.5gb x2 + 2g.10gb + 3g.20gb), with the placements spelled out.
A100_40GB_ALL_BALANCED: tuple[tuple[str, int], ...] = (
    ("2g.10gb", 0),
    ("1g.5gb", 2),
    ("1g.5gb", 3),
    ("3g.20gb", 4),
)

NODE_PROFILES: Mapping[str, NodeProfile] = {
    p.name: p
    for p in (
        NodeProfile(
            name="dgx-h100",
            model_id="H100-SXM5-80GB",
            slots=_HGX_HOPPER_SLOTS,
            fabric=FabricKind.NO_CLIQUE,
            addressing_mode="HMM",
            description="8 x H100 SXM5 80GB, NVSwitch, MIG capable and disabled",
        ),
        NodeProfile(
            name="dgx-a100",
            model_id="A100-SXM4-40GB",
            slots=_DGX_A100_SLOTS,
            mig_enabled=True,
            mig_layout=A100_40GB_ALL_BALANCED,
            description="8 x A100 SXM4 40GB with mig-parted all-balanced applied",
        ),
        NodeProfile(
            name="dgx-a100-80gb",
            model_id="A100-SXM4-80GB",
            slots=_DGX_A100_SLOTS,
            description="8 x A100 SXM4 80GB, NVSwitch, MIG capable and disabled (whole GPUs)",
        ),
        NodeProfile(
            name="hgx-h200",
            model_id="H200",
            slots=_HGX_HOPPER_SLOTS,
            fabric=FabricKind.NO_CLIQUE,
            addressing_mode="HMM",
            description="8 x H200 141GB, NVSwitch, MIG disabled",
        ),
        NodeProfile(
            name="dgx-b200",
            model_id="B200",
            slots=_HGX_HOPPER_SLOTS,
            fabric=FabricKind.NO_CLIQUE,
            addressing_mode="HMM",
            description="8 x B200 180GB, NVSwitch, MIG disabled",
        ),
        NodeProfile(
            name="gb200-nvl72",
            model_id="GB200",
            slots=(
                GpuSlot("0008:01:00.0", 0, "pci0008:00"),
                GpuSlot("0009:01:00.0", 0, "pci0009:00"),
                GpuSlot("0018:01:00.0", 1, "pci0018:00"),
                GpuSlot("0019:01:00.0", 1, "pci0019:00"),
            ),
            fabric=FabricKind.NVL72,
            addressing_mode="ATS",
            description="one GB200 NVL72 compute tray (4 GPUs); 18 trays form one rack and NVLink clique",
        ),
        NodeProfile(
            name="l4x4",
            model_id="L4",
            slots=_FOUR_PCIE_SLOTS,
            addressing_mode="HMM",
            description="4 x L4 PCIe, no MIG",
        ),
        NodeProfile(
            name="a30x4",
            model_id="A30",
            slots=_FOUR_PCIE_SLOTS,
            description="4 x A30 PCIe, MIG capable and disabled",
        ),
    )
}


def node_profile(name: str) -> NodeProfile:
    try:
        return NODE_PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(NODE_PROFILES))
        raise ConfigurationError(f"unknown node profile {name!r} (known: {known})") from None


def profile_names() -> tuple[str, ...]:
    """The names of the node profiles, sorted."""
    return tuple(sorted(NODE_PROFILES))
