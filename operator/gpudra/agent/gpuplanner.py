"""The GPU driver's plan of one claim, decided from models alone (pure, no I/O): which hardware each allocation
result names, the claim's CDI spec and sharing settings, its device metadata files, and which GPUs go to
vfio-pci first.

:class:`~gpudra.agent.claimpreparer.ClaimPreparer` reads what the plan needs (the node's inventory after creating
the dynamic MIG instances the claim names, and its PCI GPUs when passthrough is on), calls :func:`plan_gpu_claim`,
then records and carries out the plan, as it does with the plan of the compute-domain driver's planner.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpudra.agent.checkpoint import VfioBindingRecord
from gpudra.agent.devicemetadata import with_device_metadata
from gpudra.agent.prepareplan import ClaimPlan, DeviceTarget, device_targets, plan_claim
from gpudra.api.dra import DeviceRequestAllocationResult, ResourceClaim
from gpudra.api.nvidia import SharingFeatures
from gpudra.hardware.gpus.inventory import NodeInventory, PciGpu


@dataclass(frozen=True, slots=True)
class PrepareOptions:
    """How the GPU driver plans a claim (a driver with its own ``planner`` decides for itself)."""

    features: SharingFeatures | None = None
    """Which sharing strategies opaque configs may ask for (all when None)."""
    mps_root: str = "/var/lib/kubelet/plugins/gpu.nvidia.com/mps"
    """Where each MPS claim's pipe and log directories live on the node."""
    dev_root: str = "/"
    """Where the host keeps the NVIDIA device nodes the CDI specs name: the driver root or ``/``
    (:func:`gpudra.agent.devicenodes.device_root`)."""
    mig_caps_major: int | None = None
    """The ``nvidia-caps`` character-device major: MIG capabilities are named by number (None: by host path)."""
    passthrough: bool = False
    """Prepare ``gpu-vfio-<i>`` devices (bind their GPUs to vfio-pci)."""
    device_metadata: bool = False
    """Write device metadata files (KEP-5304) into the effects' ``data_dir`` (when it has one)."""


@dataclass(frozen=True, slots=True)
class GpuClaimPlan:
    """The claim's plan, and the GPUs prepare records and binds to vfio-pci before it records the plan."""

    claim: ClaimPlan
    vfio_bindings: tuple[VfioBindingRecord, ...]


class LatestTargets:
    """:func:`device_targets` of the latest reading of the GPUs, kept while the readings are equal to it: the
    prepares that run at once share a reading (:class:`gpudra.agent.freshinventory.FreshInventory`), and so
    share its targets, instead of each building all 56 MIG devices' of a dgx-h100 (most of a static MIG
    prepare's planning); a later reading of unchanged GPUs (prepares one after another) keeps them too.
    Comparing two readings of a static-MIG dgx-h100 takes 0.03 ms, building the targets 0.6 ms."""

    def __init__(self) -> None:
        self._inventory: NodeInventory | None = None
        self._dynamic: frozenset[str] = frozenset()
        self._pci: tuple[PciGpu, ...] = ()
        self._targets: Mapping[str, DeviceTarget] = {}

    def __call__(
        self, inventory: NodeInventory, dynamic: Collection[str], pci_gpus: Sequence[PciGpu]
    ) -> Mapping[str, DeviceTarget]:
        dynamic, pci = frozenset(dynamic), tuple(pci_gpus)
        same = inventory is self._inventory or inventory == self._inventory
        if not same or dynamic != self._dynamic or pci != self._pci:
            self._targets = device_targets(inventory, dynamic, pci)
            self._inventory, self._dynamic, self._pci = inventory, dynamic, pci
        return self._targets


def plan_gpu_claim(
    uid: str,
    claim: ResourceClaim,
    results: Sequence[DeviceRequestAllocationResult],
    inventory: NodeInventory,
    *,
    driver: str,
    options: PrepareOptions,
    dynamic: Collection[str] = frozenset(),
    pci_gpus: Sequence[PciGpu] = (),
    data_dir: Path | None = None,
    targets: Mapping[str, DeviceTarget] | None = None,
) -> GpuClaimPlan:
    """The plan of ``results`` on ``inventory``: ``dynamic`` holds the UUIDs of the GPUs in dynamic MIG mode,
    ``pci_gpus`` the GPUs the PCI bus shows (passthrough on), ``data_dir`` where device metadata files go.
    ``targets``: ``device_targets`` of these three, when the caller has them already. PrepareError when a result
    names a device that is not here or a config cannot be applied."""
    if targets is None:
        targets = device_targets(inventory, dynamic, pci_gpus)
    plan = plan_claim(
        uid, claim, results, targets, driver=driver, features=options.features,
        mps_root=options.mps_root, dev_root=options.dev_root, caps_major=options.mig_caps_major,
    )  # fmt: skip
    if options.device_metadata and data_dir is not None:
        plan = with_device_metadata(
            plan, claim, results, inventory, driver=driver, data_dir=data_dir, pci_gpus=pci_gpus
        )
    bindings = tuple(
        VfioBindingRecord(pci_bus_id=t.pci_bus_id, device_name=t.name)
        for r in results
        if (t := targets[r.device]).pci_bus_id is not None
    )
    return GpuClaimPlan(plan, bindings)
