"""The GPU seam: what the agent asks of a node's GPUs, whoever answers (real NVML or the simulation)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from typing import Protocol, runtime_checkable

from gpudra.api.base import FrozenModel
from gpudra.hardware.gpus.inventory import MigDeviceInfo, NodeInventory, PciGpu


class MigModeResult(FrozenModel):
    """The outcome of a MIG mode change. ``pending`` differs from ``current`` until the GPU is reset."""

    gpu_index: int
    current: bool
    pending: bool
    activation_code: str  # "NVML_SUCCESS", or why the mode is still pending ("NVML_ERROR_IN_USE", ...)

    @property
    def active(self) -> bool:
        """The requested mode is in effect."""
        return self.current == self.pending

    @property
    def reset_required(self) -> bool:
        return self.current != self.pending


class MigProfileInfo(FrozenModel):
    """A GPU-instance profile the GPU supports, with its valid placements (in memory slices)."""

    profile: str  # "1g.10gb", "1g.10gb+me"
    gi_profile_id: int
    slice_count: int  # compute slices
    placement_size: int  # memory slices
    placements: tuple[int, ...]  # valid starts
    instance_count: int
    memory_bytes: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int


class GpuInstanceInfo(FrozenModel):
    """A MIG GPU instance as NVML lists it, whether or not a compute instance (and so a MIG device) exists in
    it: a process killed between creating the two, or between destroying them, leaves one without. It holds its
    memory slices all the same."""

    gi_id: int
    profile: str  # "1g.10gb", "1g.10gb+me"
    placement_start: int
    placement_size: int
    compute_instances: int


class HealthEventKind(StrEnum):
    XID = "xid"
    DOUBLE_BIT_ECC = "double-bit-ecc"
    SINGLE_BIT_ECC = "single-bit-ecc"
    GPU_LOST = "gpu-lost"


class HealthEvent(FrozenModel):
    """One health event of a GPU (or of one MIG device on it, when ``gi_id`` / ``ci_id`` are set).

    ``gpu_uuid`` names the GPU; ``gpu_index`` is its NVML index when the watch was registered, for logs only:
    a GPU bound to vfio-pci leaves NVML and moves the indices of the GPUs after it."""

    kind: HealthEventKind
    gpu_index: int | None  # None when NVML could not say which GPU
    gpu_uuid: str | None  # None when NVML could not say which GPU
    xid: int | None = None
    gi_id: int | None = None
    ci_id: int | None = None


class ChangeCount:
    """How many changes to the GPUs (MIG mode and instances, sharing settings, vfio bindings) a backend has begun
    and how many have ended, from any thread: a reading under way is as fresh as a new one for whoever asks while
    no change was in progress at its start and none has begun since (changes made outside gpudra are not
    counted)."""

    def __init__(self) -> None:
        self.begun = 0
        self.ended = 0
        self._lock = threading.Lock()

    def mark(self) -> int | None:
        """Taken just before a reading: what :meth:`none_since` compares with (None while a change is in
        progress, when no reading can be called current)."""
        with self._lock:
            return self.begun if self.begun == self.ended else None

    def none_since(self, mark: int | None) -> bool:
        """Whether no change was in progress at ``mark`` and none has begun since: a reading that began at the
        mark sees every change made through the backend until now."""
        return mark is not None and self.begun == mark

    @contextmanager
    def one(self) -> Iterator[None]:
        with self._lock:
            self.begun += 1
        try:
            yield
        finally:
            with self._lock:
                self.ended += 1


@runtime_checkable
class GpuBackend(Protocol):
    """Everything gpudra does to a node's GPUs. Raises :class:`gpudra.errors.HardwareError` subclasses."""

    node_name: str
    changes: ChangeCount
    """The changes made through this backend."""

    def read_inventory(self, *, nvlink_peers: bool = True) -> NodeInventory:
        """A fresh reading of every GPU and MIG device. ``nvlink_peers`` False leaves each GPU's NVLink peers
        empty: they describe the node's devices to the scheduler, and a prepare's plan does not use them (an
        8-GPU node asks NVML for 56 pairs)."""
        ...

    def set_mig_mode(self, gpu_index: int, enabled: bool) -> MigModeResult:
        """Enable or disable MIG; the result says whether it is in effect or waits for a GPU reset."""
        ...

    def mig_profiles(self, gpu_index: int) -> tuple[MigProfileInfo, ...]:
        """The GPU-instance profiles the GPU supports with their placements; empty for GPUs without MIG."""
        ...

    def create_mig_device(self, gpu_index: int, profile: str, placement_start: int) -> MigDeviceInfo:
        """Create a GPU instance at the given placement and its full-size compute instance."""
        ...

    def destroy_mig_device(self, gpu_index: int, gi_id: int) -> None:
        """Destroy a GPU instance: its compute instances first, then the instance itself."""
        ...

    def gpu_instances(self, gpu_index: int) -> tuple[GpuInstanceInfo, ...]:
        """The GPU's MIG GPU instances, those without a compute instance (no MIG device shows them) too."""
        ...

    def set_compute_mode(self, gpu_uuid: str, exclusive_process: bool) -> None:
        """MPS sharing: EXCLUSIVE_PROCESS (only the MPS server opens the GPU), or back to DEFAULT."""
        ...

    def set_time_slice(self, gpu_uuid: str, interval: int) -> None:
        """Time-slicing: the compute-policy time slice (0 Default, 1 Short, 2 Medium, 3 Long)."""
        ...

    def pci_gpus(self) -> tuple[PciGpu, ...]:
        """Every NVIDIA GPU on the PCI bus in address order, those bound to vfio-pci (gone from NVML) too."""
        ...

    def bind_vfio(self, pci_bus_id: str) -> PciGpu:
        """Passthrough: move the GPU from the nvidia driver to vfio-pci (nothing when it is there already).
        HardwareInUse while processes run on it or it has MIG instances."""
        ...

    def unbind_vfio(self, pci_bus_id: str) -> PciGpu:
        """Give a GPU bound to vfio-pci back to the nvidia driver (nothing when it is there already)."""
        ...

    def wait_health_event(self, timeout_s: float) -> HealthEvent | None:
        """Block up to ``timeout_s`` for an XID / ECC / lost-GPU event; None when none came."""
        ...

    def listen_for_health_events(self, listener: Callable[[], None] | None) -> bool:
        """Have ``listener`` called (from any thread) whenever an event may be waiting, so that
        ``wait_health_event(0)`` need not block in a thread; None stops it. False when the library cannot (real
        NVML: a thread must wait)."""
        ...

    def close(self) -> None:
        """Release the library (nvmlShutdown) and event sets."""
        ...
