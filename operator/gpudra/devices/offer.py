"""Pure: what a node offers, finished in one call. From the GPUs read and the agent's state (dynamic-MIG GPUs, the
instances claims created, health taints, lost GPUs) to the devices and counter sets its ResourceSlices publish:
built (:mod:`gpudra.devices.dynamic`), time-sliced (:mod:`gpudra.devices.sharing`), offered for passthrough
(:mod:`gpudra.devices.passthrough`), with NVLink peers (:mod:`gpudra.devices.nvlinkpeers`), tainted, and with a lost
GPU's devices as last published. The agent calls this once per publish and publishes the result."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpudra.api.dra import Device, DeviceTaint
from gpudra.devices.dynamic import DynamicMemo, NodeDevices, build_node_devices
from gpudra.devices.names import gpu_device_name, mig_device_name
from gpudra.devices.nvlinkpeers import with_nvlink_peers
from gpudra.devices.passthrough import with_passthrough
from gpudra.devices.sharing import time_sliced
from gpudra.hardware.gpus.backend import MigProfileInfo
from gpudra.hardware.gpus.inventory import GpuInfo, NodeInventory, PciGpu

GpuTaints = Mapping[tuple[str, int | None], DeviceTaint]
"""(GPU UUID, GPU instance id or None for the whole GPU) -> the taint health has on it now."""


@dataclass(frozen=True)
class OfferSettings:
    """The node's publishing settings (from the agent's configuration and what the API server supports)."""

    shared_gpu_replicas: int = 0
    nvlink_peers: bool = False
    informational_taints: bool = True
    """Taints with effect None too (Kubernetes 1.35+; a 1.34 API server refuses them)."""


@dataclass(frozen=True)
class NodeState:
    """What only the agent knows about its GPUs beyond the reading."""

    dynamic: Mapping[str, Sequence[MigProfileInfo]] = field(default_factory=dict)
    claimed: Mapping[str, Iterable[tuple[str, int]]] | None = None
    pci_gpus: Sequence[PciGpu] | None = None
    """The node's PCI GPUs with passthrough on; None with it off."""
    gpu_taints: GpuTaints = field(default_factory=dict)
    lost: Sequence[Device] = ()
    """Devices of lost GPUs to publish as last published (already tainted gpu-lost)."""


def node_offer(
    inventory: NodeInventory, state: NodeState, settings: OfferSettings, memo: DynamicMemo | None = None
) -> NodeDevices:
    """The devices and counter sets the node publishes; ``memo``: the dynamic GPUs' builds of the previous
    call (see :class:`DynamicMemo`). InvalidInputError as build_devices."""
    built = build_node_devices(inventory, state.dynamic, claimed=state.claimed, memo=memo)
    offered = NodeDevices(time_sliced(built.devices, settings.shared_gpu_replicas), built.counter_sets)
    if state.pci_gpus is not None:
        offered = with_passthrough(offered, inventory, state.pci_gpus)
    devices = offered.devices
    if settings.nvlink_peers:
        devices = with_nvlink_peers(devices, inventory)
    devices = with_taints(
        devices,
        device_taints(inventory, state.gpu_taints, built.devices),
        informational=settings.informational_taints,
    )
    names = {d.name for d in devices}
    devices += [d for d in state.lost if d.name not in names]
    return NodeDevices(devices, offered.counter_sets)


def device_taints(
    inventory: NodeInventory, gpu_taints: GpuTaints, devices: Sequence[Device] = ()
) -> dict[str, list[DeviceTaint]]:
    """Device name -> taints: a whole-GPU taint goes on the GPU and all its MIG devices (among ``devices``, every
    device whose parentUUID is the GPU: the placements a dynamic GPU offers); a MIG instance's on its device."""
    out: dict[str, list[DeviceTaint]] = {}
    for gpu in inventory.gpus:
        whole = gpu_taints.get((gpu.uuid, None))
        if whole is not None:
            parents = [d.name for d in devices if parent_uuid(d) == gpu.uuid]
            for name in dict.fromkeys(device_names(gpu) + parents):
                out.setdefault(name, []).append(whole)
        for mig in gpu.mig_devices:
            taint = gpu_taints.get((gpu.uuid, mig.gi_id))
            if taint is not None:
                name = mig_device_name(gpu.minor, mig.profile, mig.gi_profile_id, mig.placement_start)
                out.setdefault(name, []).append(taint)
    return out


def with_taints(
    devices: Sequence[Device], taints: Mapping[str, list[DeviceTaint]], *, informational: bool = True
) -> list[Device]:
    """The devices with their taints set (devices without taints unchanged). ``informational=False`` leaves out
    the taints with effect None, which Kubernetes knows only from 1.35 on (a 1.34 API server refuses them)."""
    if not informational:
        taints = {n: kept for n, ts in taints.items() if (kept := [t for t in ts if t.effect != "None"])}
    return [
        d.model_copy(update={"taints": _unique(taints[d.name])}) if d.name in taints else d for d in devices
    ]


def device_names(gpu: GpuInfo) -> list[str]:
    """The names of a GPU's device and its MIG devices as read."""
    return [gpu_device_name(gpu.minor)] + [
        mig_device_name(gpu.minor, mig.profile, mig.gi_profile_id, mig.placement_start)
        for mig in gpu.mig_devices
    ]


def parent_uuid(device: Device) -> str | None:
    """The UUID of the GPU a MIG device (or placement) belongs to; None for a whole GPU."""
    attribute = (device.attributes or {}).get("parentUUID")
    return attribute.string if attribute is not None else None


def _unique(taints: Iterable[DeviceTaint]) -> list[DeviceTaint]:
    seen: dict[tuple[str, str | None], DeviceTaint] = {}
    for taint in taints:
        seen[(taint.key, taint.value)] = taint
    return list(seen.values())
