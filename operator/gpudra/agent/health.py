"""GPU health: NVML events become device taints on this node's ResourceSlices, and taints go away again.

NVIDIA's keys: ``gpu.nvidia.com/xid`` (value: the XID), ``gpu.nvidia.com/gpu-lost``; XIDs that are application
errors rather than hardware faults (13, 31, 43, 45, 68, 109 by default) are recorded with effect None, so they show
but do not repel. XIDs named in ``evicting_xids`` (those that mean a dead GPU) get effect NoExecute instead of
NoSchedule: Kubernetes' device-taint eviction controller then evicts the pods using the device. Unlike NVIDIA's driver,
a taint is removed when the device has been quiet for ``recovery_seconds`` (0: never; then only an agent restart
clears it). A lost GPU disappears from the inventory and so from the slices; it stays recorded as lost until it is
seen again. With ``evict_lost_gpus`` its devices stay published instead, as they were last published, with the taint
``gpu.nvidia.com/gpu-lost`` NoExecute, so that the pods on it are evicted rather than left running blind.

:meth:`HealthState.problems` says which devices are unhealthy now and why (a repelling taint, or a lost GPU): the
kubelet plugin marks the claims prepared on them, and the health stream reports them to the kubelet. Application
XIDs and single-bit ECC errors (effect None) do not make a device unhealthy. Pure state plus functions; the agent
feeds it events.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpudra.api.dra import Device, DeviceTaint
from gpudra.api.timestamps import rfc3339
from gpudra.config import DEFAULT_IGNORED_XIDS
from gpudra.devices import (
    GpuTaints,
    device_names,
    device_taints,
    parent_uuid,
)
from gpudra.hardware.gpus.backend import HealthEvent, HealthEventKind
from gpudra.hardware.gpus.inventory import NodeInventory

XID_KEY = "gpu.nvidia.com/xid"
ECC_KEY = "gpu.nvidia.com/ecc"
LOST_KEY = "gpu.nvidia.com/gpu-lost"


@dataclass(frozen=True, slots=True)
class DeviceProblem:
    """Why a device is unhealthy: a condition reason (``Xid79``, ``EccDoubleBit``, ``GpuLost``) and a sentence."""

    reason: str
    message: str


@dataclass
class _Mark:
    taint: DeviceTaint
    seen: float


@dataclass
class HealthState:
    ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS
    recovery_seconds: float = 300.0
    evicting_xids: frozenset[int] = frozenset()
    """XIDs tainted NoExecute (the GPU is dead: evict its pods); they win over ``ignored_xids``."""
    evict_lost_gpus: bool = False
    """Keep a lost GPU's devices published, tainted gpu-lost NoExecute (see :meth:`remember_published`)."""
    marks: dict[tuple[str, int | None], _Mark] = field(
        default_factory=dict
    )  # (gpu uuid, gi id) -> latest taint
    lost: dict[str, float] = field(default_factory=dict)  # gpu uuid -> when it was lost
    names: dict[str, frozenset[str]] = field(default_factory=dict)  # gpu uuid -> its device names, last seen
    lost_devices: dict[str, tuple[Device, ...]] = field(default_factory=dict)
    """gpu uuid -> its devices as last published (``evict_lost_gpus``): published again, tainted, once it is lost."""

    def record(self, event: HealthEvent, now: float) -> DeviceTaint | None:
        """Remember the event's taint (or the loss of the GPU); None for a lost GPU and for events that name no
        GPU (logged by the caller)."""
        if event.gpu_uuid is None:
            return None
        if event.kind == HealthEventKind.GPU_LOST:
            self.lost[event.gpu_uuid] = now
            return None
        if event.kind == HealthEventKind.XID:
            effect = "None" if event.xid in self.ignored_xids else "NoSchedule"
            if event.xid in self.evicting_xids:
                effect = "NoExecute"
            taint = DeviceTaint(key=XID_KEY, value=str(event.xid), effect=effect, time_added=_stamp(now))
        elif event.kind == HealthEventKind.DOUBLE_BIT_ECC:
            taint = DeviceTaint(key=ECC_KEY, value="double-bit", effect="NoSchedule", time_added=_stamp(now))
        else:
            taint = DeviceTaint(key=ECC_KEY, value="single-bit", effect="None", time_added=_stamp(now))
        self.marks[(event.gpu_uuid, event.gi_id)] = _Mark(taint, now)
        return taint

    def expire(self, now: float) -> bool:
        """Drop taints of devices quiet for recovery_seconds; True when something recovered."""
        if self.recovery_seconds <= 0:
            return False
        stale = [k for k, m in self.marks.items() if now - m.seen >= self.recovery_seconds]
        for key in stale:
            del self.marks[key]
        return bool(stale)

    def remember(self, inventory: NodeInventory, read_at: float) -> bool:
        """Learn the device names of the GPUs present (so a lost GPU's devices can still be named); a lost GPU
        seen in a reading started after it was lost is back. True when one came back."""
        back = False
        for gpu in inventory.gpus:
            self.names[gpu.uuid] = frozenset(device_names(gpu))
            if gpu.uuid in self.lost and self.lost[gpu.uuid] < read_at:
                del self.lost[gpu.uuid]
                back = True
        return back

    def remember_published(self, published: Sequence[Device]) -> None:
        """With ``evict_lost_gpus``: remember each GPU's devices as published (the GPU itself, its MIG devices,
        the placements a dynamic GPU offered), so that they can be published again once it is lost; a GPU absent
        from ``published`` keeps what was remembered. The counters they consume are left out (the GPU's counter
        set leaves with it, and a device consuming an unknown counter set would make the whole pool invalid)."""
        if not self.evict_lost_gpus:
            return
        by_gpu: dict[str, list[Device]] = {}
        for device in published:
            owner = parent_uuid(device) or _uuid(device)
            if owner is not None and owner not in self.lost:
                by_gpu.setdefault(owner, []).append(
                    device.model_copy(update={"consumes_counters": None, "taints": None})
                )
        self.lost_devices.update({uuid: tuple(devices) for uuid, devices in by_gpu.items()})

    def lost_published(self) -> list[Device]:
        """With ``evict_lost_gpus``: the lost GPUs' devices to publish, tainted gpu-lost NoExecute since the loss."""
        out: list[Device] = []
        if not self.evict_lost_gpus:
            return out
        for uuid, since in sorted(self.lost.items()):
            taint = DeviceTaint(key=LOST_KEY, value=uuid, effect="NoExecute", time_added=_stamp(since))
            out += [d.model_copy(update={"taints": [taint]}) for d in self.lost_devices.get(uuid, ())]
        return out

    def problems(self, inventory: NodeInventory | None) -> dict[str, DeviceProblem]:
        """Device name -> why it is unhealthy now, for devices with a repelling taint and devices of lost GPUs."""
        out: dict[str, DeviceProblem] = {}
        for uuid in self.lost:
            for name in self.names.get(uuid, ()):
                out[name] = DeviceProblem("GpuLost", f"GPU {uuid} is lost (fell off the bus); {name} is gone")
        if inventory is None:
            return out
        for name, taints in self.taints_for(inventory).items():
            repelling = [t for t in taints if t.effect != "None"]
            if repelling and name not in out:
                out[name] = _problem(name, repelling[-1])
        return out

    def gpu_taints(self) -> GpuTaints:
        """(GPU UUID, GI id or None) -> the taint on it now."""
        return {key: mark.taint for key, mark in self.marks.items()}

    def taints_for(
        self, inventory: NodeInventory, devices: Sequence[Device] = ()
    ) -> dict[str, list[DeviceTaint]]:
        """Device name -> taints (see :func:`gpudra.devices.offer.device_taints`)."""
        return device_taints(inventory, self.gpu_taints(), devices)


def _problem(name: str, taint: DeviceTaint) -> DeviceProblem:
    what = f"{taint.key}={taint.value}:{taint.effect}"
    if taint.key == XID_KEY:
        return DeviceProblem(f"Xid{taint.value}", f"XID {taint.value} reported for {name}; tainted {what}")
    return DeviceProblem("EccDoubleBit", f"double-bit ECC error on {name}; tainted {what}")


def _uuid(device: Device) -> str | None:
    attribute = (device.attributes or {}).get("uuid")
    return attribute.string if attribute is not None else None


def _stamp(now: float) -> str:
    return rfc3339(now)
