"""What a node's GPUs are, as read from the hardware: the contract between the hardware seam and the pure layers.

Values are in the units NVML reports (bytes, counts); names are the ones NVIDIA's tools print. Immutable: a new
reading is a new object, so two readings compare with ``==``.
"""

from __future__ import annotations

from gpudra.api.base import FrozenModel


class FabricInfo(FrozenModel):
    """nvmlDeviceGetGpuFabricInfoV. ``clique`` is "<clusterUuid>.<cliqueId>", or None when the GPU is in no clique
    (NOT_SUPPORTED, state not COMPLETED, status not SUCCESS, or an all-zero cluster UUID)."""

    cluster_uuid: str
    clique_id: int
    state: int
    status: int

    @property
    def clique(self) -> str | None:
        if self.state != 3 or self.status != 0 or set(self.cluster_uuid.replace("-", "")) <= {"0"}:
            return None
        return f"{self.cluster_uuid}.{self.clique_id}"


class MigDeviceInfo(FrozenModel):
    """One MIG device (a GPU instance with its compute instance) as NVML reports it."""

    uuid: str
    parent_uuid: str
    parent_index: int
    parent_minor: int
    profile: str  # "1g.10gb", "1g.10gb+me"
    gi_profile_id: int  # the id nvidia-smi prints (19 for 1g on A100/H100), not the NVML constant
    ci_profile_id: int
    gi_id: int
    ci_id: int
    placement_start: int
    placement_size: int
    memory_bytes: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int


class GpuInfo(FrozenModel):
    """One physical GPU."""

    index: int
    minor: int
    uuid: str
    # None where NVML did not say, or said something gpudra cannot publish (see NodeInventory.problems)
    product_name: str | None  # "NVIDIA H100 80GB HBM3"
    brand: str | None  # "Nvidia", "Tesla", ...
    architecture: str | None  # "Hopper", "Ampere", "Blackwell", "Ada Lovelace"
    cuda_compute_capability: str | None  # "9.0"
    pci_bus_id: str  # "0000:1a:00.0" (lower case, 4-digit domain)
    pci_device_id: int  # 0x233010DE
    pcie_root: str | None = None  # "pci0000:10" when resolvable
    numa_node: int | None = None
    addressing_mode: str | None = None  # "HMM" | "ATS" | "None" when supported
    memory_bytes: int | None  # None: NVML does not report it (GB10's unified memory) or failed to
    multiprocessors: int  # 0: nvmlDeviceGetAttributes answers for MIG devices only, not for a whole GPU
    mig_capable: bool
    mig_enabled: bool  # current mode
    mig_pending: bool  # pending mode (after a reset)
    mig_devices: tuple[MigDeviceInfo, ...] = ()
    nvlink_count: int = 0
    # UUIDs of the other GPUs of the node this one reaches over NVLink (nvmlDeviceGetP2PStatus with
    # NVML_P2P_CAPS_INDEX_NVLINK answering OK), sorted; empty without NVLink peers
    nvlink_peers: tuple[str, ...] = ()
    fabric: FabricInfo | None = None


class GpuProblem(FrozenModel):
    """An NVML call on one GPU that failed or answered what gpudra cannot publish. ``published``: the GPU is in
    the inventory without that detail; otherwise it is left out (its other GPUs are not)."""

    gpu_index: int
    gpu_uuid: str | None  # None when the UUID itself could not be read
    call: str  # "nvmlDeviceGetArchitecture"
    detail: str  # "answered 99, an architecture gpudra does not know; published without it"
    published: bool

    @property
    def message(self) -> str:
        gpu = f"GPU {self.gpu_index}" + (f" ({self.gpu_uuid})" if self.gpu_uuid else "")
        outcome = "published without what it did not say" if self.published else "not published"
        return f"{gpu}: {self.call} {self.detail}; {outcome}"


class NodeInventory(FrozenModel):
    """Everything the agent publishes about one node."""

    node_name: str
    driver_version: str  # "550.54.15"
    cuda_driver_version: str  # "12.4"
    gpus: tuple[GpuInfo, ...] = ()
    problems: tuple[GpuProblem, ...] = ()  # what could not be read, GPU by GPU and call by call


class PciGpu(FrozenModel):
    """One NVIDIA GPU as the PCI bus sees it, whichever kernel driver holds it: while bound to vfio-pci for
    passthrough it is gone from NVML but still here. Read from sysfs (or the simulation)."""

    pci_bus_id: str  # "0000:1a:00.0", as GpuInfo.pci_bus_id
    pci_device_id: int  # (device id << 16) | vendor id, as NVML's pciDeviceId: 0x233010DE
    driver: str | None  # the bound kernel driver: "nvidia", "vfio-pci", None when none is bound
    iommu_group: int | None  # /sys/kernel/iommu_groups/<n>; None without an IOMMU
    numa_node: int | None = None
    pcie_root: str | None = None
    product_name: str | None = None  # None: sysfs does not say (the backend fills it in)
    addressable_memory_bytes: int = 0  # the sizes of the device's memory BARs
