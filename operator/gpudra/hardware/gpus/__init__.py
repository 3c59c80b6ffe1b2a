"""A node's GPUs as types: what a reading of them holds (inventory), the GPU catalog, the backend protocol the agent
calls them through, the PCI names and MIG facts as NVML reports them. Pure: no NVML, no sysfs; the pure cores
(allocator, devices, mig, planning) depend on this package alone of ``gpudra.hardware`` (an import-linter
contract holds it)."""

from gpudra.hardware.gpus.backend import (
    GpuBackend,
    GpuInstanceInfo,
    HealthEvent,
    HealthEventKind,
    MigModeResult,
    MigProfileInfo,
)
from gpudra.hardware.gpus.catalog import (
    MIB,
    Catalog,
    ComputeInstanceProfile,
    GpuModel,
    MigModel,
    MigProfile,
    MigSpec,
    load_catalog,
    mig_profile_name,
    parse_catalog,
)
from gpudra.hardware.gpus.inventory import (
    FabricInfo,
    GpuInfo,
    GpuProblem,
    MigDeviceInfo,
    NodeInventory,
    PciGpu,
)
from gpudra.hardware.gpus.migfacts import mig_model, mig_spec
from gpudra.hardware.gpus.pcinames import NVIDIA_DRIVER, NVIDIA_VENDOR, VFIO_DRIVER

__all__ = [
    "MIB",
    "NVIDIA_DRIVER",
    "NVIDIA_VENDOR",
    "VFIO_DRIVER",
    "Catalog",
    "ComputeInstanceProfile",
    "FabricInfo",
    "GpuBackend",
    "GpuInfo",
    "GpuInstanceInfo",
    "GpuModel",
    "GpuProblem",
    "HealthEvent",
    "HealthEventKind",
    "MigDeviceInfo",
    "MigModeResult",
    "MigModel",
    "MigProfile",
    "MigProfileInfo",
    "MigSpec",
    "NodeInventory",
    "PciGpu",
    "load_catalog",
    "mig_model",
    "mig_profile_name",
    "mig_spec",
    "parse_catalog",
]
