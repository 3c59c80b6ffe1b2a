"""Time-sliced GPUs as DRA devices that several claims share (consumable capacity, KEP-5075).

The device-plugin way of sharing (time-slicing with ``replicas: N``, resource ``nvidia.com/gpu.shared``) becomes:
every full GPU of a node with ``shared_gpu_replicas = N`` is published once, with

- ``allowMultipleAllocations: true``;
- attribute ``gpudra.dev/sharing = "TimeSlicing"`` (the shipped ``gpu.nvidia.com`` class leaves these GPUs out, the
  ``shared.gpu.nvidia.com`` class of examples/extended-resources/ selects only them);
- capacity ``gpudra.dev/shares = N``, each allocation taking exactly one (at most N tenants, as the device plugin's
  replicas);
- capacity ``memory`` (NVIDIA's name, the GPU's memory) with a request policy: a claim may ask for
  ``capacity.requests: {memory: 20Gi}`` (whole MiB, up to the GPU's memory), and one that does not gets
  ``memory / N`` (rounded down to MiB). This is what the scheduler and Kueue charge; time-slicing itself does not
  enforce memory (MPS with pinned-memory limits does).

MIG devices, and GPUs published as partitionable devices (dynamic MIG: they consume counters), are never shared
this way. Pure: devices in, devices out.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpudra.api.dra import (
    CapacityRequestPolicy,
    CapacityRequestPolicyRange,
    Device,
    DeviceAttribute,
    DeviceCapacity,
)
from gpudra.api.quantity import format_quantity, parse_quantity

SHARING_ATTRIBUTE = "gpudra.dev/sharing"
SHARES_CAPACITY = "gpudra.dev/shares"
TIME_SLICING = "TimeSlicing"
_MIB = 1 << 20


def time_sliced(devices: Sequence[Device], replicas: int) -> list[Device]:
    """The devices with every full GPU turned into a time-sliced GPU of ``replicas`` shares (0: unchanged)."""
    if replicas <= 0:
        return list(devices)
    return [_shared(device, replicas) if _is_full_gpu(device) else device for device in devices]


def _is_full_gpu(device: Device) -> bool:
    kind = (device.attributes or {}).get("type")
    return kind is not None and kind.value == "gpu" and not device.consumes_counters


def _shared(device: Device, replicas: int) -> Device:
    capacity = dict(device.capacity or {})
    memory = int(parse_quantity(capacity["memory"].value))
    share = max(_MIB, memory // replicas // _MIB * _MIB)
    capacity["memory"] = DeviceCapacity(
        value=format_quantity(memory),
        request_policy=CapacityRequestPolicy(
            default=format_quantity(share),
            valid_range=CapacityRequestPolicyRange(
                min=format_quantity(_MIB), max=format_quantity(memory), step=format_quantity(_MIB)
            ),
        ),
    )
    capacity[SHARES_CAPACITY] = DeviceCapacity(
        value=format_quantity(replicas),
        request_policy=CapacityRequestPolicy(default="1", valid_values=["1"]),
    )
    attributes = {**(device.attributes or {}), SHARING_ATTRIBUTE: DeviceAttribute(string=TIME_SLICING)}
    return device.model_copy(
        update={"attributes": attributes, "capacity": capacity, "allow_multiple_allocations": True}
    )
