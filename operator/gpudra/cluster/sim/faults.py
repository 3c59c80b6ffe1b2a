"""Faults and hardware changes on a simulated node: what a real GPU would do, done to the node's simulated NVML.

A fault names a node, a device and what happens. The device is written as the ResourceSlice names it (``gpu-3``,
``gpu-1-mig-1g5gb-19-2``), as a GPU index (``3``), or ``all`` (every GPU of the node). What follows is left to
the agent, exactly as with real hardware: an XID or ECC error is an NVML event that the agent's health watcher
turns into taints, claim conditions and a Node Event; a lost GPU stops answering NVML; a GPU that leaves its
NVLink fabric reports a fabric state that is not COMPLETED. ``Recover`` undoes what only hardware can undo (a lost
GPU answers again, the fabric registers again); XID and ECC taints clear by themselves once the device has been
quiet for the agent's recovery period, as on a real node.

Both ways in (the ``gpudra sim fault`` endpoint and GpuFault objects) call :func:`inject`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from gpudra.api.base import WireModel
from gpudra.devices import parse_mig_device_name
from gpudra.errors import InvalidInputError
from gpudra.hardware.simulated import FakeNvml
from gpudra.hardware.simulated import nvml_types as t
from gpudra.hardware.simulated.events import WHOLE_GPU

FaultKind = Literal["Xid", "EccDoubleBit", "EccSingleBit", "GpuLost", "FabricLost", "Recover"]
FAULT_KINDS: tuple[str, ...] = ("Xid", "EccDoubleBit", "EccSingleBit", "GpuLost", "FabricLost", "Recover")
MAX_XID = 2**32 - 1  # NVML carries the XID in an unsigned event-data field

_GPU_NAME = re.compile(r"^gpu-(\d+)$")


class FaultRejected(InvalidInputError):
    """The fault cannot happen as asked (no such node or device, an XID without its code, ...)."""


class FaultSpec(WireModel):
    """One fault or hardware change on a simulated node."""

    node_name: str = Field(description="The simulated node, e.g. dgx-h100-0.")
    device: str = Field(
        description="A device as its ResourceSlice names it (gpu-3, or a MIG device such as "
        "gpu-1-mig-1g5gb-19-2), a GPU index (3), or all (every GPU of the node)."
    )
    fault: FaultKind = Field(
        description="Xid (needs xid), EccDoubleBit, EccSingleBit, GpuLost (the GPU falls off the bus), "
        "FabricLost (the GPU leaves its NVLink fabric), Recover (a lost GPU answers again and the fabric "
        "registers again)."
    )
    xid: int | None = Field(default=None, ge=0, le=MAX_XID, description="The XID code, for fault Xid.")

    @field_validator("device", mode="before")
    @classmethod
    def _index_as_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


@dataclass(frozen=True)
class Target:
    """One GPU of the node, or one MIG device on it (its GPU-instance and compute-instance ids)."""

    gpu: int
    gi_id: int | None = None
    ci_id: int | None = None

    def describe(self, nvml: FakeNvml) -> str:
        gpu = nvml.gpu(self.gpu)
        where = f"GPU {self.gpu} ({gpu.uuid})"
        return where if self.gi_id is None else f"MIG GPU instance {self.gi_id} of {where}"


@dataclass(frozen=True)
class FaultOutcome:
    """What the fault did. ``heard`` is False when no NVML event set watched the GPU: the event was lost, as
    NVML loses an event nobody waits for (the agent's health watcher is not running, or health checks are off)."""

    message: str
    heard: bool = True


def parse_fault(body: object) -> FaultSpec:
    """A FaultSpec from a JSON body; FaultRejected naming the fields that are wrong."""
    try:
        spec = FaultSpec.model_validate(body)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()
        )
        raise FaultRejected(f"invalid fault: {problems}") from exc
    if spec.fault == "Xid" and spec.xid is None:
        raise FaultRejected("invalid fault: xid: an Xid fault needs the XID code (e.g. 79)")
    if spec.fault != "Xid" and spec.xid is not None:
        raise FaultRejected(f"invalid fault: xid: only an Xid fault takes an XID code, not {spec.fault}")
    return spec


def inject(fleet: Mapping[str, FakeNvml], spec: FaultSpec) -> FaultOutcome:
    """Make the fault happen on the node's simulated GPUs."""
    nvml = fleet.get(spec.node_name)
    if nvml is None:
        known = ", ".join(sorted(fleet)) or "none"
        raise FaultRejected(f"no simulated node {spec.node_name!r} (nodes: {known})")
    targets = resolve(nvml, spec.device, spec.node_name)
    if spec.fault == "Recover":
        return _recover(nvml, targets, spec.node_name)
    if spec.fault == "FabricLost":
        return _lose_fabric(nvml, targets, spec.node_name)
    for target in targets:
        if nvml.gpu(target.gpu).lost:
            raise FaultRejected(
                f"GPU {target.gpu} of {spec.node_name} is lost already (fault Recover brings it back)"
            )
    if spec.fault == "GpuLost":
        for target in targets:
            if target.gi_id is not None:
                raise FaultRejected("a MIG device cannot be lost alone: name its GPU (gpu-N) instead")
            nvml.lose_gpu(target.gpu)
        return FaultOutcome(f"{_listing(nvml, targets)} of {spec.node_name} fell off the bus")
    return _event(nvml, targets, spec)


def resolve(nvml: FakeNvml, device: str, node: str) -> list[Target]:
    """The GPUs (or the MIG device) that ``device`` names on the node."""
    count = nvml.gpu_count()
    text = device.strip()
    if text == "all":
        return [Target(i) for i in range(count)]
    if text.isdigit():
        if int(text) >= count:
            raise FaultRejected(f"{node} has GPUs 0 to {count - 1}; there is no GPU {text}")
        return [Target(int(text))]
    gpu_match = _GPU_NAME.match(text)
    mig = parse_mig_device_name(text)
    if gpu_match is None and mig is None:
        raise FaultRejected(
            f"device {device!r}: expected gpu-N, a MIG device name (gpu-N-mig-...), a GPU index, or all"
        )
    minor = int(gpu_match.group(1)) if gpu_match else mig[0] if mig else -1
    index = next((i for i in range(count) if nvml.gpu(i).minor == minor), None)
    if index is None:
        minors = ", ".join(f"gpu-{nvml.gpu(i).minor}" for i in range(count))
        raise FaultRejected(f"{node} has no GPU gpu-{minor} (its GPUs: {minors})")
    if mig is None:
        return [Target(index)]
    _, profile_id, start = mig
    for gi in nvml.gpu(index).gpu_instances.values():
        if gi.profile.profile_id == profile_id and gi.start == start and gi.cis:
            return [Target(index, gi.gi_id, min(gi.cis))]
    raise FaultRejected(f"GPU {index} of {node} has no MIG device {text} (no such instance exists now)")


def _event(nvml: FakeNvml, targets: list[Target], spec: FaultSpec) -> FaultOutcome:
    unheard = []
    for target in targets:
        if spec.fault == "Xid":
            assert spec.xid is not None
            heard = nvml.inject_xid(target.gpu, spec.xid, *_instance_ids(target))
        elif target.gi_id is not None:
            raise FaultRejected("ECC errors are reported for a whole GPU: name the GPU (gpu-N) instead")
        else:
            heard = nvml.inject_ecc(target.gpu, double_bit=spec.fault == "EccDoubleBit")
        if not heard:
            unheard.append(target.gpu)
    what = f"XID {spec.xid}" if spec.fault == "Xid" else _ECC_WORDS[spec.fault]
    done = f"{what} on {_listing(nvml, targets)} of {spec.node_name}"
    if unheard:
        gpus = ", ".join(map(str, unheard))
        return FaultOutcome(
            f"{done}; no NVML event set watched GPU {gpus}, so the event was lost as NVML loses an event "
            "nobody waits for (is the node's agent running with health checks on?)",
            heard=False,
        )
    return FaultOutcome(done)


_ECC_WORDS = {"EccDoubleBit": "double-bit ECC error", "EccSingleBit": "single-bit ECC error"}


def _instance_ids(target: Target) -> tuple[int, int]:
    if target.gi_id is None or target.ci_id is None:
        return (WHOLE_GPU, WHOLE_GPU)
    return (target.gi_id, target.ci_id)


def _lose_fabric(nvml: FakeNvml, targets: list[Target], node: str) -> FaultOutcome:
    for target in targets:
        if target.gi_id is not None:
            raise FaultRejected("the NVLink fabric is a GPU's: name the GPU (gpu-N) or all")
        if nvml.fabric_state(target.gpu) != t.NVML_GPU_FABRIC_STATE_COMPLETED:
            raise FaultRejected(
                f"GPU {target.gpu} of {node} ({nvml.gpu(target.gpu).model.product_name}) is not registered in "
                "an NVLink fabric"
            )
    for target in targets:
        nvml.lose_fabric(target.gpu)
    return FaultOutcome(f"{_listing(nvml, targets)} of {node} left the NVLink fabric")


def _recover(nvml: FakeNvml, targets: list[Target], node: str) -> FaultOutcome:
    changes = []
    for target in targets:
        if target.gi_id is not None:
            raise FaultRejected("recovery is a GPU's: name the GPU (gpu-N) or all")
        gpu = nvml.gpu(target.gpu)
        if gpu.lost:
            nvml.restore_gpu(target.gpu)
            changes.append(f"{target.describe(nvml)} answers again")
        if nvml.fabric_state(target.gpu) == t.NVML_GPU_FABRIC_STATE_NOT_STARTED:
            nvml.restore_fabric(target.gpu)
            changes.append(f"{target.describe(nvml)} is back in its NVLink fabric")
    if not changes:
        return FaultOutcome(
            f"nothing to recover on {node}: no GPU named is lost or out of its fabric; XID and ECC taints "
            "clear by themselves once the device has been quiet for the agent's recovery period "
            "(GPUDRA_HEALTH_RECOVERY_SECONDS)"
        )
    return FaultOutcome(f"recovered on {node}: " + "; ".join(changes))


def _listing(nvml: FakeNvml, targets: list[Target]) -> str:
    if len(targets) > 1:
        return f"GPUs {', '.join(str(t.gpu) for t in targets)}"
    return targets[0].describe(nvml)
