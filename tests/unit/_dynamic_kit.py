"""A simulated node with MIG mode on and no MIG instances, for the dynamic-MIG tests of devices and of charges."""

from __future__ import annotations

from functools import cache

from gpudra.hardware.gpus.backend import MigProfileInfo
from gpudra.hardware.gpus.inventory import NodeInventory
from gpudra.hardware.simulated import empty_mig, simulated_backend

NODE = "n1"


@cache
def node(profile: str = "dgx-h100") -> tuple[NodeInventory, dict[str, tuple[MigProfileInfo, ...]]]:
    """A node of ``profile`` with MIG mode on and no instances, and each GPU's profiles as NVML reports them."""
    backend = simulated_backend(profile, NODE).backend
    empty_mig(backend)
    inventory = backend.read_inventory()
    return inventory, {gpu.uuid: backend.mig_profiles(gpu.index) for gpu in inventory.gpus}
