"""Which GPUs this node publishes as dynamic MIG, and their MIG profiles.

A GPU is dynamic when it is MIG-capable, has MIG mode on, and is chosen: by ``mig_policy: Dynamic`` for every such
GPU, or by the set a MigLayout hands over at run time (:meth:`DynamicSelection.choose`), which then wins over the
policy until it is cleared again. A GPU chosen while its MIG mode is off stays published whole (logged).

Each dynamic GPU's MIG profiles are read once through the given reader (NVML) and kept: they do not change while
the GPU stays in the node. No I/O of its own.
"""

from __future__ import annotations

from collections.abc import Callable

from gpudra.hardware.gpus.backend import MigProfileInfo
from gpudra.hardware.gpus.inventory import NodeInventory
from gpudra.telemetry import get_logger

log = get_logger(__name__)

ProfileReader = Callable[[int], tuple[MigProfileInfo, ...]]
"""GPU index -> its MIG profiles (the hardware's answer)."""


class DynamicSelection:
    def __init__(self, *, node: str, mig_policy: str, read_profiles: ProfileReader) -> None:
        self._node = node
        self._mig_policy = mig_policy
        self._read_profiles = read_profiles
        self._chosen: frozenset[str] | None = None
        self._profiles: dict[str, tuple[MigProfileInfo, ...]] = {}

    def choose(self, uuids: set[str] | frozenset[str] | None) -> bool:
        """Exactly these GPUs (by UUID) are dynamic from now on; None: back to ``mig_policy``. True when that
        changed which GPUs are chosen."""
        wanted = None if uuids is None else frozenset(uuids)
        if wanted == self._chosen:
            return False
        self._chosen = wanted
        log.info(
            "dynamic MIG GPUs set",
            node=self._node,
            gpus=sorted(wanted) if wanted is not None else f"policy {self._mig_policy}",
        )
        return True

    def wants(self, uuid: str) -> bool:
        """Whether the GPU is chosen for dynamic MIG (whatever its MIG mode)."""
        chosen = self._chosen
        return uuid in chosen if chosen is not None else self._mig_policy == "Dynamic"

    def gpus(self, inventory: NodeInventory | None) -> frozenset[str]:
        """UUIDs of the GPUs of ``inventory`` that are dynamic (MIG-capable, MIG mode on, chosen)."""
        if inventory is None:
            return frozenset()
        return frozenset(
            gpu.uuid for gpu in inventory.gpus if gpu.mig_capable and gpu.mig_enabled and self.wants(gpu.uuid)
        )

    def profiles(self, inventory: NodeInventory) -> dict[str, tuple[MigProfileInfo, ...]]:
        """GPU UUID -> its MIG profiles, for the GPUs that are dynamic in ``inventory`` (each read once)."""
        out: dict[str, tuple[MigProfileInfo, ...]] = {}
        for gpu in inventory.gpus:
            if not (gpu.mig_capable and self.wants(gpu.uuid)):
                continue
            if not gpu.mig_enabled:
                log.warning("dynamic MIG needs MIG mode on; the GPU is published whole", gpu=gpu.uuid)
                continue
            if gpu.uuid not in self._profiles:
                self._profiles[gpu.uuid] = self._read_profiles(gpu.index)
            out[gpu.uuid] = self._profiles[gpu.uuid]
        return out
