"""GPU health: NVML events become device taints on this node's ResourceSlices, and taints go away again.

NVIDIA's keys: ``gpu.nvidia.com/xid`` (value: the XID), ``gpu.nvidia.com/gpu-lost``; XIDs that are application
errors rather than hardware faults (13, 31, 43, 45, 68, 109 by default) are recorded with effect None, so they show
but do not repel. Unlike NVIDIA's driver, a taint is removed when the device has been quiet for
``recovery_seconds`` (0: never; then only an agent restart clears it). A lost GPU disappears from the inventory and so
from the slices. Pure state plus one function that applies it to devices; the agent feeds it events.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gpudra.api.resource import Device, DeviceTaint
from gpudra.devices.names import gpu_device_name, mig_device_name
from gpudra.hardware.backend import HealthEvent, HealthEventKind
from gpudra.hardware.inventory import NodeInventory

XID_KEY = "gpu.nvidia.com/xid"
ECC_KEY = "gpu.nvidia.com/ecc"
DEFAULT_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})


@dataclass
class _Mark:
    taint: DeviceTaint
    seen: float


@dataclass
class HealthState:
    ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS
    recovery_seconds: float = 300.0
    marks: dict[tuple[str, int | None], _Mark] = field(
        default_factory=dict
    )  # (gpu uuid, gi id) -> latest taint

    def record(self, event: HealthEvent, now: float) -> DeviceTaint | None:
        """Remember the event's taint; None for events that name no GPU (logged by the caller)."""
        if event.gpu_uuid is None or event.kind == HealthEventKind.GPU_LOST:
            return None
        if event.kind == HealthEventKind.XID:
            effect = "None" if event.xid in self.ignored_xids else "NoSchedule"
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

    def taints_for(
        self, inventory: NodeInventory, devices: Sequence[Device] = ()
    ) -> dict[str, list[DeviceTaint]]:
        """Device name -> taints: a whole-GPU event taints the GPU and all its MIG devices (among ``devices``, every
        device whose parentUUID is the GPU: the placements a dynamic GPU offers); a MIG event its device."""
        out: dict[str, list[DeviceTaint]] = {}
        for gpu in inventory.gpus:
            whole = self.marks.get((gpu.uuid, None))
            names = [gpu_device_name(gpu.minor)]
            if whole is not None:
                names += [d.name for d in devices if _parent_uuid(d) == gpu.uuid]
                for mig in gpu.mig_devices:
                    names.append(
                        mig_device_name(gpu.minor, mig.profile, mig.gi_profile_id, mig.placement_start)
                    )
                for name in dict.fromkeys(names):
                    out.setdefault(name, []).append(whole.taint)
            for mig in gpu.mig_devices:
                mark = self.marks.get((gpu.uuid, mig.gi_id))
                if mark is not None:
                    name = mig_device_name(gpu.minor, mig.profile, mig.gi_profile_id, mig.placement_start)
                    out.setdefault(name, []).append(mark.taint)
        return out


def _parent_uuid(device: Device) -> str | None:
    attribute = (device.attributes or {}).get("parentUUID")
    return attribute.string if attribute is not None else None


def with_taints(devices: Sequence[Device], taints: dict[str, list[DeviceTaint]]) -> list[Device]:
    """Pure: the devices with their taints set (devices without taints unchanged)."""
    return [
        d.model_copy(update={"taints": _unique(taints[d.name])}) if d.name in taints else d for d in devices
    ]


def _unique(taints: Iterable[DeviceTaint]) -> list[DeviceTaint]:
    seen: dict[tuple[str, str | None], DeviceTaint] = {}
    for taint in taints:
        seen[(taint.key, taint.value)] = taint
    return list(seen.values())


def _stamp(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
