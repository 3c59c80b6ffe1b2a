"""Node profiles: what a simulated machine holds (which GPUs, where on the PCIe tree, MIG state, NVLink
fabric). The built-in ones are data (``profiles.yaml``), written as fleet files write theirs.

A profile entry (:class:`ProfileEntry`) names a GPU model of the catalog and where each GPU sits (``pci``, or just
``gpus: N``), or starts from another profile with ``base`` and changes what differs. :func:`resolve_entry` turns
it into a :class:`NodeProfile`; what is wrong raises :class:`SpecError` with the path of the field, so a file
loader can name the line.

A profile plus a node name (and, for multi-node NVLink systems, the node's position in the fleet) fully
determines a simulated node: UUIDs are derived from the node name, PCI addresses and NUMA nodes come from the
profile, the way every real machine of one type shares the same PCIe layout."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from gpudra import shippedyaml
from gpudra.errors import ConfigurationError
from gpudra.hardware.gpus.catalog import Catalog, GpuModel, load_catalog

# Namespace of every UUID the simulation derives (GPU, MIG, fabric cluster).
SIMULATION_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "simulated.gpudra.dev")

FABRIC_STATE_COMPLETED = 3  # NVML_GPU_FABRIC_STATE_COMPLETED
FABRIC_STATUS_SUCCESS = 0  # NVML_SUCCESS
NVL72_TRAYS_PER_RACK = 18
NVL72_CLIQUE_ID = 32766  # [unverified] the clique id a rack reports without fabric partitions


class NvlinkTopology(Enum):
    """Which GPUs of the node reach each other over NVLink (what nvmlDeviceGetP2PStatus answers for
    NVML_P2P_CAPS_INDEX_NVLINK)."""

    NONE = "none"  # PCIe only (L4, or A30 / H100 PCIe without bridges)
    NVSWITCH = "nvswitch"  # every GPU reaches every other: DGX/HGX A100, H100, H200, B200, a GB200 tray
    BRIDGED_PAIRS = "bridged-pairs"  # NVLink bridges join GPU 0 with 1, 2 with 3, ... (PCIe cards)


class FabricKind(Enum):
    UNSUPPORTED = "unsupported"  # nvmlDeviceGetGpuFabricInfoV raises NOT_SUPPORTED (Ampere, PCIe cards)
    NO_CLIQUE = "no-clique"  # HGX H100/H200/B200: state COMPLETED, status SUCCESS, all-zero cluster UUID
    NVL72 = "nvl72"  # GB200 NVL72: one cluster UUID per rack of 18 compute trays


@dataclass(frozen=True)
class GpuSlot:
    """Where one GPU sits in the machine."""

    pci_bus_id: str  # "0000:1b:00.0"
    numa_node: int | None  # None: NVML answers NOT_SUPPORTED (a VM, as recorded)
    pcie_root: str | None  # "pci0000:15"; None: not resolvable (as the backend reports it)


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
    nvlink: NvlinkTopology = NvlinkTopology.NONE
    addressing_mode: str | None = None  # "HMM" | "ATS" | None (nvmlDeviceGetAddressingMode NOT_SUPPORTED)
    driver_version: str = "580.95.05"
    cuda_driver_version: int = 13000  # nvmlSystemGetCudaDriverVersion: 1000 * major + 10 * minor
    description: str = ""

    @property
    def gpu_count(self) -> int:
        return len(self.slots)

    def nvlink_islands(self) -> tuple[tuple[int, ...], ...]:
        """The GPUs (by index) that reach each other over NVLink, one tuple per island of two or more."""
        indexes = tuple(range(self.gpu_count))
        if self.nvlink is NvlinkTopology.NVSWITCH and len(indexes) > 1:
            return (indexes,)
        if self.nvlink is NvlinkTopology.BRIDGED_PAIRS:
            return tuple(indexes[i : i + 2] for i in range(0, len(indexes) - 1, 2))
        return ()

    def fabric_reading(self, fleet_index: int = 0) -> FabricReading | None:
        """The fabric info of this node's GPUs; ``fleet_index`` is the node's position in the fleet."""
        if self.fabric is FabricKind.UNSUPPORTED:
            return None
        if self.fabric is FabricKind.NO_CLIQUE:
            return FabricReading(str(uuid.UUID(int=0)), 0, FABRIC_STATE_COMPLETED, FABRIC_STATUS_SUCCESS)
        rack = fleet_index // NVL72_TRAYS_PER_RACK
        cluster = uuid.uuid5(SIMULATION_NAMESPACE, f"{self.name}/rack/{rack}")
        return FabricReading(str(cluster), NVL72_CLIQUE_ID, FABRIC_STATE_COMPLETED, FABRIC_STATUS_SUCCESS)


Loc = tuple[str | int, ...]
NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?$"
MAX_GPUS = 64


class SpecError(ConfigurationError):
    """An entry that validates but cannot be built; ``loc`` is the path of the field at fault."""

    def __init__(self, message: str, loc: Loc) -> None:
        super().__init__(message)
        self.loc = loc


class EntryModel(BaseModel):
    """camelCase keys, unknown keys refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class PciSlotEntry(EntryModel):
    bus_id: str = Field(pattern=r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
    numa_node: int | None = Field(default=None, ge=0, description="None: NVML answers NOT_SUPPORTED (a VM)")
    pcie_root: str = Field(pattern=r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")


class MigDeviceEntry(EntryModel):
    profile: str = Field(description="a MIG profile of the GPU model, e.g. 1g.10gb")
    start: int = Field(ge=0, description="the placement start (first memory slice)")


class MigEntry(EntryModel):
    """MIG on every GPU of the machine: ``devices`` are created at start (an empty list: MIG on, no instances);
    ``enabled: false`` turns MIG off; neither: as the base profile has it."""

    enabled: bool = True
    devices: tuple[MigDeviceEntry, ...] = ()


class ProfileEntry(EntryModel):
    name: str = Field(pattern=NAME_PATTERN, description="lower-case letters, digits and dashes")
    description: str = ""
    base: str | None = Field(default=None, description="a profile to start from")
    gpu: str | None = Field(default=None, description="a GPU catalog model, e.g. H100-SXM5-80GB")
    gpus: int | None = Field(default=None, ge=1, le=MAX_GPUS, description="how many GPUs")
    pci: tuple[PciSlotEntry, ...] | None = Field(default=None, min_length=1, max_length=MAX_GPUS)
    fabric: Literal["unsupported", "no-clique", "nvl72"] | None = None
    nvlink: Literal["none", "nvswitch", "bridged-pairs"] | None = Field(
        default=None, description="which GPUs reach each other over NVLink"
    )
    addressing_mode: Literal["HMM", "ATS", "None"] | None = None
    driver_version: str | None = Field(default=None, pattern=r"^\d+\.\d+(\.\d+)?$")
    cuda_driver_version: str | None = Field(default=None, pattern=r"^\d+\.\d$")
    mig: MigEntry | None = None


def resolve_entry(entry: ProfileEntry, known: Mapping[str, NodeProfile], catalog: Catalog) -> NodeProfile:
    base = _base(entry, known)
    model_id = entry.gpu or (base.model_id if base else None)
    if model_id is None:
        raise SpecError("give `gpu` (a GPU catalog model) or `base` (a profile to start from)", ("gpu",))
    if model_id not in catalog.models:
        raise SpecError(
            f"unknown GPU model {model_id!r} (known: {', '.join(sorted(catalog.models))})", ("gpu",)
        )
    model = catalog.models[model_id]
    same_model = base is not None and base.model_id == model_id
    mig_enabled, layout = _mig(entry, model, base if same_model else None)
    profile = NodeProfile(
        name=entry.name,
        model_id=model_id,
        slots=_slots(entry, base),
        mig_enabled=mig_enabled,
        mig_layout=layout,
        fabric=FabricKind(entry.fabric) if entry.fabric else base.fabric if base else FabricKind.UNSUPPORTED,
        nvlink=NvlinkTopology(entry.nvlink) if entry.nvlink else base.nvlink if base else NvlinkTopology.NONE,
        addressing_mode=entry.addressing_mode or (base.addressing_mode if base else None),
        driver_version=entry.driver_version or (base.driver_version if base else NodeProfile.driver_version),
        cuda_driver_version=_cuda(entry.cuda_driver_version)
        if entry.cuda_driver_version
        else (base.cuda_driver_version if base else NodeProfile.cuda_driver_version),
        description=entry.description or (base.description if base else ""),
    )
    return profile


def _base(entry: ProfileEntry, known: Mapping[str, NodeProfile]) -> NodeProfile | None:
    if entry.base is None:
        return None
    if entry.base not in known:
        raise SpecError(f"unknown profile {entry.base!r} (known: {', '.join(sorted(known))})", ("base",))
    return known[entry.base]


def _slots(entry: ProfileEntry, base: NodeProfile | None) -> tuple[GpuSlot, ...]:
    if entry.pci is not None:
        if entry.gpus is not None and entry.gpus != len(entry.pci):
            raise SpecError(f"gpus is {entry.gpus} but pci lists {len(entry.pci)} GPUs", ("gpus",))
        slots = tuple(GpuSlot(p.bus_id.lower()[-12:], p.numa_node, p.pcie_root) for p in entry.pci)
        if len({s.pci_bus_id for s in slots}) != len(slots):
            raise SpecError("two GPUs share a PCI bus id", ("pci",))
        return slots
    if entry.gpus is None:
        if base is None:
            raise SpecError("give `gpus` (how many) or `pci` (where each GPU sits)", ("gpus",))
        return base.slots
    if base is not None and entry.gpus <= base.gpu_count:
        return base.slots[: entry.gpus]
    return generated_slots(entry.gpus)


def generated_slots(count: int) -> tuple[GpuSlot, ...]:
    """A plain PCIe layout: one root complex per GPU, the first half of the GPUs on NUMA node 0."""
    return tuple(
        GpuSlot(f"0000:{i + 1:02x}:00.0", i * 2 // count, f"pci0000:{i + 1:02x}") for i in range(count)
    )


def _mig(
    entry: ProfileEntry, model: GpuModel, base: NodeProfile | None
) -> tuple[bool, tuple[tuple[str, int], ...]]:
    if entry.mig is None or (entry.mig.enabled and "devices" not in entry.mig.model_fields_set):
        return (base.mig_enabled, base.mig_layout) if base else (False, ())
    if not entry.mig.enabled:
        if entry.mig.devices:
            raise SpecError("MIG devices need MIG enabled", ("mig", "devices"))
        return False, ()
    if model.mig is None:
        raise SpecError(f"{model.product_name} ({model.model_id}) does not support MIG", ("mig",))
    layout = []
    for i, device in enumerate(entry.mig.devices):
        profile = next((p for p in model.mig.profiles if p.name == device.profile), None)
        if profile is None:
            known = ", ".join(p.name for p in model.mig.profiles)
            raise SpecError(f"{model.model_id} has no MIG profile {device.profile!r} (known: {known})",
                            ("mig", "devices", i, "profile"))  # fmt: skip
        if device.start not in profile.starts:
            starts = ", ".join(map(str, profile.starts))
            raise SpecError(f"{device.profile} starts at {starts}, not {device.start}",
                            ("mig", "devices", i, "start"))  # fmt: skip
        layout.append((device.profile, device.start))
    return True, tuple(layout)


def _cuda(text: str) -> int:
    major, minor = text.split(".")
    return 1000 * int(major) + 10 * int(minor)


def _builtin() -> dict[str, NodeProfile]:
    """The profiles of ``profiles.yaml`` (entries in the fleet-file format, see :mod:`profilespec`)."""
    document = shippedyaml.load(
        resources.files("gpudra.hardware.simulated").joinpath("profiles.yaml").read_text()
    )
    catalog = load_catalog()
    profiles: dict[str, NodeProfile] = {}
    for raw in document["profiles"]:
        entry = ProfileEntry.model_validate(raw)
        profiles[entry.name] = resolve_entry(entry, profiles, catalog)
    return profiles


NODE_PROFILES: Mapping[str, NodeProfile] = _builtin()


def node_profile(name: str) -> NodeProfile:
    try:
        return NODE_PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(NODE_PROFILES))
        raise ConfigurationError(f"unknown node profile {name!r} (known: {known})") from None


def profile_names() -> tuple[str, ...]:
    """The names of the node profiles, sorted."""
    return tuple(sorted(NODE_PROFILES))
