"""This node's GPUs and the MIG facts of their models, as NVML reports them, for the node's MIG report.

A GPU is named by its catalog model id when the catalog knows it (by PCI device id, then product name), else by
its product name; either way its MIG profiles, placements, sizes and engine counts come from NVML
(:meth:`GpuBackend.mig_profiles`), read once per GPU: they belong to the GPU and its driver, not to its
partitioning.
"""

from __future__ import annotations

from collections.abc import Callable

from gpudra.errors import HardwareError
from gpudra.hardware.gpus.backend import MigProfileInfo
from gpudra.hardware.gpus.catalog import Catalog, MigModel
from gpudra.hardware.gpus.inventory import GpuInfo, NodeInventory
from gpudra.mig import (
    GpuMigFacts,
    NodeGpu,
    model_of_gpu,
)
from gpudra.telemetry import get_logger

log = get_logger(__name__)

ProfileReader = Callable[[GpuInfo], tuple[MigProfileInfo, ...]]


def model_id_of_gpu(gpu: GpuInfo, catalog: Catalog) -> str:
    """The catalog's id for the GPU's model; its product name (or PCI device id) when the catalog lacks it."""
    known = model_of_gpu(gpu, catalog)
    if known is not None:
        return known.model_id
    return gpu.product_name or f"{gpu.pci_device_id:#010x}"


class NodeMigFacts:
    """The node's GPUs and their models' MIG facts. ``read_profiles`` is called on the calling thread."""

    def __init__(self, catalog: Catalog, read_profiles: ProfileReader, *, node: str) -> None:
        self._catalog = catalog
        self._read_profiles = read_profiles
        self._node = node
        self._profiles: dict[str, tuple[MigProfileInfo, ...]] = {}  # GPU UUID -> its profiles

    def _profiles_of(self, gpu: GpuInfo) -> tuple[MigProfileInfo, ...]:
        if gpu.uuid not in self._profiles:
            try:
                self._profiles[gpu.uuid] = self._read_profiles(gpu)
            except HardwareError as exc:  # reported without MIG facts; the next reading tries again
                log.warning(
                    "cannot read the GPU's MIG profiles", node=self._node, gpu=gpu.uuid, error=str(exc)
                )
                return ()
        return self._profiles[gpu.uuid]

    def read(self, inventory: NodeInventory) -> tuple[tuple[NodeGpu, ...], tuple[GpuMigFacts, ...]]:
        """The GPUs as the report names them, and the MIG facts of each MIG-capable model (the first GPU of a
        model speaks for it)."""
        gpus: list[NodeGpu] = []
        facts: dict[str, GpuMigFacts] = {}
        for gpu in inventory.gpus:
            model = model_id_of_gpu(gpu, self._catalog)
            gpus.append(NodeGpu(index=gpu.index, model=model, pci_device_id=gpu.pci_device_id))
            if not gpu.mig_capable or model in facts:
                continue
            profiles = self._profiles_of(gpu)
            if profiles:
                facts[model] = GpuMigFacts(
                    model=model,
                    product_name=gpu.product_name or "",
                    pci_device_id=gpu.pci_device_id,
                    memory_bytes=gpu.memory_bytes or 0,
                    profiles=profiles,
                )
        return tuple(gpus), tuple(facts.values())


def models_of(facts: tuple[GpuMigFacts, ...]) -> dict[str, MigModel]:
    """Model id -> MIG facts, for :func:`gpudra.mig.desired.gpu_layouts`."""
    return {f.model: f.mig_model() for f in facts}
