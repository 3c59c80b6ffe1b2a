"""The state of one simulated GPU and the MIG rules NVML enforces on it.

Errors are the NVML error classes a real GPU answers with:

* placement start not in the profile's list, unknown profile id: INVALID_ARGUMENT
* a profile the model does not have (nvmlDeviceGetGpuInstanceProfileInfo): NOT_SUPPORTED
* MIG calls while MIG mode is (currently) disabled, any MIG call on a GPU without MIG: NOT_SUPPORTED
* overlapping memory slices, a profile past its instance count, more compute slices than the GPU has, media
  engines taken (JPEG/OFA: a ``+me`` instance and the 7g/4g full profile both need the one OFA):
  INSUFFICIENT_RESOURCES
* destroying a GPU instance that still has compute instances, disabling MIG while GPU instances exist: IN_USE
* anything on a lost GPU: GPU_IS_LOST

GPU-instance ids follow the hardware's "swizzle" numbering: the full GPU is 0, halves 1-2, quarters 3-6,
eighths 7-14 (so a 1g at placement 6 of an A100 is GPU instance 13, as nvidia-smi shows). Without an explicit
placement, creation takes the highest free start, as NVML does (which is why, on an A100, creating 1g,1g,2g,3g
in that order fails while 3g,1g,2g,1g succeeds).

MIG mode: nvmlDeviceSetMigMode always records the pending mode. It takes effect at once unless the GPU has
processes (activation status IN_USE) or the test asked for a reset to be required (RESET_REQUIRED); then the
pending mode waits for :meth:`SimulatedGpu.reset`."""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field

from gpudra.hardware.gpus.catalog import ComputeInstanceProfile, GpuModel, MigProfile, MigSpec
from gpudra.hardware.gpus.pcinames import NVIDIA_DRIVER
from gpudra.hardware.simulated import nvml_types as t
from gpudra.hardware.simulated.profiles import SIMULATION_NAMESPACE, FabricReading, GpuSlot


@dataclass
class SimComputeInstance:
    serial: int
    ci_id: int
    profile: ComputeInstanceProfile
    start: int
    uuid: str
    mig_slot: int  # the index nvmlDeviceGetMigDeviceHandleByIndex finds it at


@dataclass
class SimGpuInstance:
    serial: int
    gi_id: int
    profile: MigProfile
    start: int
    cis: dict[int, SimComputeInstance] = field(default_factory=dict)

    @property
    def memory_range(self) -> range:
        return range(self.start, self.start + self.profile.placement_size)


class SimulatedGpu:
    """One GPU. Not thread-safe by itself: the FakeNvml that owns it holds the lock."""

    # the kernel driver holding it ("vfio-pci" for passthrough, None after a failed bind); a class default so that
    # states saved before passthrough existed load too
    driver: str | None = NVIDIA_DRIVER
    nvlink_island: int | None = None  # GPUs of one island reach each other over NVLink; None: no NVLink peer

    def __init__(
        self,
        *,
        index: int,
        model: GpuModel,
        minor: int | None = None,
        gpu_uuid: str,
        slot: GpuSlot,
        fabric: FabricReading | None = None,
        addressing_mode: str | None = None,
    ) -> None:
        self.index = (
            index  # its position on the PCI bus: the NVML index while no GPU before it is on vfio-pci
        )
        self.minor = index if minor is None else minor  # /dev/nvidia<minor>; the NVML index on most machines
        self.model = model
        self.uuid = gpu_uuid
        self.slot = slot
        self.fabric = fabric
        self.addressing_mode = addressing_mode
        self.mig_current = False
        self.mig_pending = False
        self.lost = False
        self.processes = 0  # processes using the GPU: MIG mode changes wait for a reset while > 0
        self.reset_required_for_mig_change = False
        self.compute_mode = 0  # NVML_COMPUTEMODE_DEFAULT; MPS sets EXCLUSIVE_PROCESS (3)
        self.time_slice = 0  # nvidia-smi compute-policy --set-timeslice value (0 Default ... 3 Long)
        self.gpu_instances: dict[int, SimGpuInstance] = {}
        self._last_serial = 0  # an int, not an itertools.count: Python 3.14 pickles no itertools object

    def __setstate__(self, state: dict[str, object]) -> None:
        """A GPU as a state file holds it; one written before 2026-12-01 kept its serials in a count."""
        serials = state.pop("_serials", None)
        if isinstance(serials, itertools.count):
            state["_last_serial"] = next(serials) - 1
        self.__dict__.update(state)

    def _serial(self) -> int:
        """A new handle serial of this GPU's MIG objects."""
        self._last_serial += 1
        return self._last_serial

    # -- basic checks ----------------------------------------------------------------------------------------

    def check_alive(self) -> None:
        if self.lost:
            raise t.NVMLError_GpuIsLost(f"GPU {self.index} ({self.uuid}) has fallen off the bus")

    def mig_spec(self) -> MigSpec:
        self.check_alive()
        if self.model.mig is None:
            raise t.NVMLError_NotSupported(f"{self.model.product_name} does not support MIG")
        return self.model.mig

    def _mig_enabled_spec(self) -> MigSpec:
        spec = self.mig_spec()
        if not self.mig_current:
            raise t.NVMLError_NotSupported(f"MIG mode is disabled on GPU {self.index}")
        return spec

    # -- MIG mode --------------------------------------------------------------------------------------------

    def set_mig_mode(self, mode: int) -> int:
        """nvmlDeviceSetMigMode: returns the activation status (an NVML return code)."""
        self.mig_spec()
        if mode not in (t.NVML_DEVICE_MIG_DISABLE, t.NVML_DEVICE_MIG_ENABLE):
            raise t.NVMLError_InvalidArgument(f"MIG mode {mode} is neither enable nor disable")
        enable = mode == t.NVML_DEVICE_MIG_ENABLE
        if not enable and self.gpu_instances:
            raise t.NVMLError_InUse(f"GPU {self.index} still has {len(self.gpu_instances)} GPU instances")
        self.mig_pending = enable
        if self.mig_current == enable:
            return t.NVML_SUCCESS
        if self.processes:
            return t.NVML_ERROR_IN_USE
        if self.reset_required_for_mig_change:
            return t.NVML_ERROR_RESET_REQUIRED
        self.mig_current = enable
        return t.NVML_SUCCESS

    def reset(self) -> None:
        """A GPU reset: the pending MIG mode becomes current. Fails IN_USE while processes run."""
        self.check_alive()
        if self.processes:
            raise t.NVMLError_InUse(f"GPU {self.index} has {self.processes} processes running")
        if self.mig_current != self.mig_pending:
            self.gpu_instances.clear()
        self.mig_current = self.mig_pending

    # -- GPU-instance profiles -------------------------------------------------------------------------------

    def profile_by_constant(self, constant: int) -> MigProfile:
        spec = self.mig_spec()
        if not 0 <= constant < t.NVML_GPU_INSTANCE_PROFILE_COUNT:
            raise t.NVMLError_InvalidArgument(f"GPU instance profile constant {constant} is out of range")
        profile = spec.profile_by_constant(constant)
        if profile is None:
            raise t.NVMLError_NotSupported(
                f"{self.model.product_name} has no GPU instance profile {constant}"
            )
        return profile

    def profile_by_id(self, profile_id: int) -> MigProfile:
        profile = self.mig_spec().profile_by_id(profile_id)
        if profile is None:
            raise t.NVMLError_InvalidArgument(
                f"{self.model.product_name} has no GPU instance profile id {profile_id}"
            )
        return profile

    def profile_constant(self, profile_id: int) -> int:
        """The NVML_GPU_INSTANCE_PROFILE_* constant of a profile id (the catalog and recordings give each)."""
        constant = self.profile_by_id(profile_id).constant
        if constant is None:
            raise t.NVMLError_NotSupported(f"GPU instance profile id {profile_id} has no profile constant")
        return constant

    def possible_placements(self, profile_id: int) -> list[tuple[int, int]]:
        profile = self.profile_by_id(profile_id)
        return [(start, profile.placement_size) for start in profile.starts]

    def remaining_capacity(self, profile_id: int) -> int:
        """How many more instances of the profile fit, filling free placements from the top as NVML does.

        Readable with MIG mode off too (a recorded H100 / H200 answers with the profile's instance count)."""
        profile = self.profile_by_id(profile_id)
        spec = self.mig_spec()
        taken = [(gi.profile, gi.start) for gi in self.gpu_instances.values()]
        count = 0
        for start in sorted(profile.starts, reverse=True):
            if _conflict(spec, taken, profile, start) is None:
                taken.append((profile, start))
                count += 1
        return count

    # -- GPU instances ---------------------------------------------------------------------------------------

    def create_gpu_instance(self, profile_id: int, placement: tuple[int, int] | None) -> SimGpuInstance:
        spec = self._mig_enabled_spec()
        profile = self.profile_by_id(profile_id)
        taken = [(gi.profile, gi.start) for gi in self.gpu_instances.values()]
        if placement is not None:
            start, size = placement
            if start not in profile.starts or size != profile.placement_size:
                valid = ", ".join(f"{s}:{profile.placement_size}" for s in profile.starts)
                raise t.NVMLError_InvalidArgument(
                    f"placement {start}:{size} is not valid for {profile.name} (valid: {valid})"
                )
            reason = _conflict(spec, taken, profile, start)
            if reason is not None:
                raise t.NVMLError_InsufficientResources(f"cannot create {profile.name} at {start}: {reason}")
        else:
            reasons = {s: _conflict(spec, taken, profile, s) for s in sorted(profile.starts, reverse=True)}
            free = [s for s, reason in reasons.items() if reason is None]
            if not free:
                first_reason = next(iter(reasons.values()))
                raise t.NVMLError_InsufficientResources(f"no room for {profile.name}: {first_reason}")
            start = free[0]
        gi = SimGpuInstance(self._serial(), _swizzle_id(spec, profile, start), profile, start)
        self.gpu_instances[gi.gi_id] = gi
        return gi

    def gpu_instance(self, gi_id: int) -> SimGpuInstance:
        self._mig_enabled_spec()
        try:
            return self.gpu_instances[gi_id]
        except KeyError:
            raise t.NVMLError_NotFound(f"GPU {self.index} has no GPU instance {gi_id}") from None

    def destroy_gpu_instance(self, gi: SimGpuInstance) -> None:
        self.check_alive()
        if gi.cis:
            raise t.NVMLError_InUse(f"GPU instance {gi.gi_id} still has {len(gi.cis)} compute instances")
        del self.gpu_instances[gi.gi_id]

    # -- compute instances -----------------------------------------------------------------------------------

    def ci_profile(self, gi: SimGpuInstance, constant: int) -> ComputeInstanceProfile:
        self.check_alive()
        if not 0 <= constant < t.NVML_COMPUTE_INSTANCE_PROFILE_COUNT:
            raise t.NVMLError_InvalidArgument(f"compute instance profile {constant} is out of range")
        for ci_profile in gi.profile.compute_instances:
            if ci_profile.constant == constant:
                return ci_profile
        raise t.NVMLError_NotSupported(f"{gi.profile.name} has no compute instance profile {constant}")

    def create_compute_instance(self, gi: SimGpuInstance, constant: int) -> SimComputeInstance:
        profile = self.ci_profile(gi, constant)
        same = sum(1 for ci in gi.cis.values() if ci.profile.constant == constant)
        if same >= profile.instance_count:
            raise t.NVMLError_InsufficientResources(
                f"{profile.name}.{gi.profile.name} allows {profile.instance_count} compute instances"
            )
        used = {s for ci in gi.cis.values() for s in range(ci.start, ci.start + ci.profile.slice_count)}
        size = profile.slice_count
        starts = [
            s
            for s in range(0, gi.profile.slice_count - size + 1, size)
            if used.isdisjoint(range(s, s + size))
        ]
        if not starts:
            raise t.NVMLError_InsufficientResources(f"no free compute slices in GPU instance {gi.gi_id}")
        spec = self.mig_spec()
        slots = {ci.mig_slot for other in self.gpu_instances.values() for ci in other.cis.values()}
        mig_slot = next(i for i in range(spec.max_devices + len(slots) + 1) if i not in slots)
        if mig_slot >= spec.max_devices:
            raise t.NVMLError_InsufficientResources(
                f"GPU {self.index} has {spec.max_devices} MIG devices already"
            )
        ci_id = next(i for i in itertools.count() if i not in gi.cis)
        name = f"{self.uuid}/gi/{gi.gi_id}/{gi.profile.profile_id}@{gi.start}/ci/{ci_id}/{constant}"
        ci = SimComputeInstance(
            serial=self._serial(),
            ci_id=ci_id,
            profile=profile,
            start=starts[0],
            uuid=f"MIG-{uuid.uuid5(SIMULATION_NAMESPACE, name)}",
            mig_slot=mig_slot,
        )
        gi.cis[ci_id] = ci
        return ci

    def destroy_compute_instance(self, gi: SimGpuInstance, ci: SimComputeInstance) -> None:
        self.check_alive()
        gi.cis.pop(ci.ci_id, None)

    # -- lookups by serial (what the opaque handles carry) ---------------------------------------------------

    def find_gpu_instance(self, serial: int) -> SimGpuInstance | None:
        return next((gi for gi in self.gpu_instances.values() if gi.serial == serial), None)

    def find_compute_instance(self, serial: int) -> tuple[SimGpuInstance, SimComputeInstance] | None:
        for gi in self.gpu_instances.values():
            for ci in gi.cis.values():
                if ci.serial == serial:
                    return gi, ci
        return None

    def mig_device_at(self, slot: int) -> tuple[SimGpuInstance, SimComputeInstance] | None:
        for gi in self.gpu_instances.values():
            for ci in gi.cis.values():
                if ci.mig_slot == slot:
                    return gi, ci
        return None


def _swizzle_id(spec: MigSpec, profile: MigProfile, start: int) -> int:
    parts = spec.memory_slices // profile.placement_size
    return parts - 1 + start // profile.placement_size


def _conflict(
    spec: MigSpec, taken: list[tuple[MigProfile, int]], profile: MigProfile, start: int
) -> str | None:
    """Why ``profile`` at ``start`` cannot join the instances in ``taken``, or None when it can."""
    wanted = set(range(start, start + profile.placement_size))
    for other, other_start in taken:
        if not wanted.isdisjoint(range(other_start, other_start + other.placement_size)):
            return f"memory slices overlap {other.name} at {other_start}"
    if sum(1 for other, _ in taken if other.profile_id == profile.profile_id) >= profile.instance_count:
        return f"{profile.name} allows {profile.instance_count} instances per GPU"
    if sum(other.slice_count for other, _ in taken) + profile.slice_count > spec.compute_slices:
        return f"the GPU has {spec.compute_slices} compute slices"
    if (
        profile.jpeg_engines
        and sum(o.jpeg_engines for o, _ in taken) + profile.jpeg_engines > spec.jpeg_capacity
    ):
        return "the JPEG engines are taken"
    if profile.ofa_engines and sum(o.ofa_engines for o, _ in taken) + profile.ofa_engines > spec.ofa_capacity:
        return "the optical flow accelerator is taken (one media-extension instance per GPU)"
    if len(taken) >= spec.max_devices:
        return f"the GPU allows {spec.max_devices} MIG devices"
    return None
