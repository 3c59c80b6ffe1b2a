"""MIG through NVML: reading MIG devices, listing profiles and placements, creating and destroying instances.

Used by :class:`gpudra.hardware.nvml.backend.NvmlBackend`; it never imports pynvml itself but calls the NVML binding
the backend holds. Profile names are computed as go-nvlib (and so NVIDIA's DRA driver) computes them: from the
GPU instance's slice count, memory and the GPU's total memory, plus the suffix of the NVML profile
constant.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from typing import Any, Protocol

from gpudra.errors import HardwareError, HardwareInvalidArgument, HardwareNotFound
from gpudra.hardware.gpus.backend import GpuInstanceInfo, MigModeResult, MigProfileInfo
from gpudra.hardware.gpus.catalog import MIB, PROFILE_SUFFIX_BY_CONSTANT, mig_profile_name
from gpudra.hardware.gpus.inventory import MigDeviceInfo

_GONE = frozenset({"NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_NOT_FOUND"})
"""What NVML answers for a GPU instance handle whose instance was destroyed after it was listed."""

_SKIPPED_PROFILE_CODES = {"NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_NOT_FOUND"}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlCalls(Protocol):
    node_name: str

    @property
    def nvml(self) -> Any: ...

    def code_name(self, value: int) -> str: ...

    def error_code(self, exc: BaseException) -> str | None: ...

    def errors(self, what: str, gpu_index: int | None = None) -> contextlib.AbstractContextManager[None]: ...

    def handle(self, gpu_index: int) -> Any: ...


class _GiProfile:
    """A GPU-instance profile as NVML reports it, with the name computed from it."""

    def __init__(self, constant: int, info: Any, total_mib: int) -> None:
        self.constant = constant
        self.info = info
        self.profile_id = int(info.id)
        suffix = PROFILE_SUFFIX_BY_CONSTANT.get(constant, "")
        self.name = mig_profile_name(int(info.sliceCount), int(info.memorySizeMB), total_mib, suffix)


class MigOperations:
    def __init__(self, calls: NvmlCalls) -> None:
        self._calls = calls
        self._read_profiles: dict[str, list[_GiProfile]] = {}
        """GPU instance profiles by GPU UUID, for reading and creating: a GPU's profiles are those of its model."""
        self._read_devices: dict[str, dict[tuple[str, int, int], MigDeviceInfo]] = {}
        """The MIG devices of each GPU's last reading (by GPU UUID), by (MIG UUID, GI id, CI id): what NVML says of
        an instance does not change while it exists, and a new instance has a new UUID."""

    # -- helpers ---------------------------------------------------------------------------------------------

    def _skippable(self, exc: BaseException) -> bool:
        return self._calls.error_code(exc) in _SKIPPED_PROFILE_CODES

    def _gi_profiles(self, handle: Any, gpu_index: int) -> list[_GiProfile]:
        nvml = self._calls.nvml
        with self._calls.errors("read the memory size", gpu_index):
            total_mib = int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // MIB
        profiles = []
        for constant in range(int(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT)):
            try:
                info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, constant)
            except nvml.NVMLError as exc:
                if self._skippable(exc):
                    continue
                with self._calls.errors(f"read GPU instance profile {constant}", gpu_index):
                    raise
            profiles.append(_GiProfile(constant, info, total_mib))
        return profiles

    def _kept_profiles(self, handle: Any, gpu_index: int, gpu_uuid: str) -> list[_GiProfile]:
        """The GPU's instance profiles, read once per GPU: they are its model's. None read (MIG off: NVML lists
        none then) is not kept."""
        profiles = self._read_profiles.get(gpu_uuid)
        if profiles is None:
            profiles = self._gi_profiles(handle, gpu_index)
            if profiles:
                self._read_profiles[gpu_uuid] = profiles
        return profiles

    def _placements(self, handle: Any, profile_id: int, gpu_index: int) -> list[tuple[int, int]]:
        nvml = self._calls.nvml
        with self._calls.errors(f"list placements of GPU instance profile {profile_id}", gpu_index):
            count = ctypes.c_uint(0)
            nvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, None, ctypes.byref(count))
            array = (nvml.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
            nvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, array, ctypes.byref(count))
            return [(int(array[i].start), int(array[i].size)) for i in range(count.value)]

    def _mig_capable(self, handle: Any, gpu_index: int) -> bool:
        nvml = self._calls.nvml
        try:
            nvml.nvmlDeviceGetMigMode(handle)
        except nvml.NVMLError as exc:
            if self._calls.error_code(exc) == "NVML_ERROR_NOT_SUPPORTED":
                return False
            with self._calls.errors("read the MIG mode", gpu_index):
                raise
        return True

    def _ci_profiles(self, gi: Any, gpu_index: int) -> Iterator[Any]:
        nvml = self._calls.nvml
        engine = int(getattr(nvml, "NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED", 0))
        for constant in range(int(nvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT)):
            try:
                yield nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, constant, engine)
            except nvml.NVMLError as exc:
                if self._skippable(exc):
                    continue
                with self._calls.errors(f"read compute instance profile {constant}", gpu_index):
                    raise

    # -- reading ---------------------------------------------------------------------------------------------

    def read_devices(
        self, handle: Any, gpu_index: int, parent_uuid: str, parent_minor: int, total_bytes: int
    ) -> tuple[MigDeviceInfo, ...]:
        """Every MIG device of the GPU, found through its MIG device handles, ordered by placement. A device the
        last reading found (same UUID, GPU instance and compute instance ids) is not read again."""
        nvml = self._calls.nvml
        by_id = {p.profile_id: p for p in self._kept_profiles(handle, gpu_index, parent_uuid)}
        known = {
            key: device
            for key, device in self._read_devices.get(parent_uuid, {}).items()
            if (device.parent_index, device.parent_minor) == (gpu_index, parent_minor)
        }  # a GPU bound to vfio-pci and back can come back under another index
        found: dict[tuple[str, int, int], MigDeviceInfo] = {}
        devices = []
        with self._calls.errors("count MIG devices", gpu_index):
            max_count = int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
        for slot in range(max_count):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nvml.NVMLError as exc:
                if self._calls.error_code(exc) == "NVML_ERROR_NOT_FOUND":
                    continue
                with self._calls.errors(f"get MIG device {slot}", gpu_index):
                    raise
            mig_uuid = None
            try:
                with self._calls.errors(f"read MIG device {slot}", gpu_index):
                    mig_uuid = nvml.nvmlDeviceGetUUID(mig)
                    gi_id = int(nvml.nvmlDeviceGetGpuInstanceId(mig))
                    ci_id = int(nvml.nvmlDeviceGetComputeInstanceId(mig))
                    key = (_text(mig_uuid), gi_id, ci_id)
                    if key in known:
                        found[key] = known[key]
                        devices.append(known[key])
                        continue
                    gi = nvml.nvmlDeviceGetGpuInstanceById(handle, gi_id)
                    gi_info = nvml.nvmlGpuInstanceGetInfo(gi)
                    ci_info = nvml.nvmlComputeInstanceGetInfo(
                        nvml.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id)
                    )
                    attributes = nvml.nvmlDeviceGetAttributes(mig)
            except (
                HardwareNotFound,
                HardwareInvalidArgument,
            ):  # what NVML answers about a destroyed instance
                if mig_uuid is None or self._gone(handle, max_count, mig_uuid):
                    continue  # destroyed while it was read (another claim's unprepare): it is gone
                raise
            profile = by_id.get(int(gi_info.profileId))
            if profile is None:
                raise HardwareError(
                    f"MIG device {mig_uuid} on GPU {gpu_index} has GPU instance profile {gi_info.profileId}, "
                    "which the GPU does not list"
                )
            device = MigDeviceInfo(
                uuid=key[0],
                parent_uuid=parent_uuid,
                parent_index=gpu_index,
                parent_minor=parent_minor,
                profile=profile.name,
                gi_profile_id=profile.profile_id,
                ci_profile_id=int(ci_info.profileId),
                gi_id=gi_id,
                ci_id=ci_id,
                placement_start=int(gi_info.placement.start),
                placement_size=int(gi_info.placement.size),
                memory_bytes=int(profile.info.memorySizeMB) * 2**20,
                multiprocessors=int(attributes.multiprocessorCount),
                copy_engines=int(attributes.sharedCopyEngineCount),
                decoders=int(attributes.sharedDecoderCount),
                encoders=int(attributes.sharedEncoderCount),
                jpeg_engines=int(attributes.sharedJpegCount),
                ofa_engines=int(attributes.sharedOfaCount),
            )
            found[key] = device
            devices.append(device)
        self._read_devices[parent_uuid] = found
        return tuple(sorted(devices, key=lambda d: (d.placement_start, d.gi_id, d.ci_id)))

    def _gone(self, handle: Any, max_count: int, mig_uuid: Any) -> bool:
        """Whether no MIG device of the GPU has this UUID any more. NVML's calls are atomic one by one only: a
        compute instance destroyed between two of them makes the next call about it answer NOT_FOUND, and a call on
        the handle of a destroyed GPU instance INVALID_ARGUMENT."""
        nvml = self._calls.nvml
        for slot in range(max_count):
            try:
                if nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)) == mig_uuid:
                    return False
            except nvml.NVMLError as exc:
                if self._calls.error_code(exc) != "NVML_ERROR_NOT_FOUND":
                    return False
        return True

    def profiles(self, gpu_index: int) -> tuple[MigProfileInfo, ...]:
        handle = self._calls.handle(gpu_index)
        if not self._mig_capable(handle, gpu_index):
            return ()
        result = []
        for profile in self._gi_profiles(handle, gpu_index):
            placements = self._placements(handle, profile.profile_id, gpu_index)
            info = profile.info
            result.append(
                MigProfileInfo(
                    profile=profile.name,
                    gi_profile_id=profile.profile_id,
                    slice_count=int(info.sliceCount),
                    placement_size=placements[0][1] if placements else 0,
                    placements=tuple(start for start, _ in placements),
                    instance_count=int(info.instanceCount),
                    memory_bytes=int(info.memorySizeMB) * 2**20,
                    multiprocessors=int(info.multiprocessorCount),
                    copy_engines=int(info.copyEngineCount),
                    decoders=int(info.decoderCount),
                    encoders=int(info.encoderCount),
                    jpeg_engines=int(info.jpegCount),
                    ofa_engines=int(info.ofaCount),
                )
            )
        return tuple(result)

    # -- changing --------------------------------------------------------------------------------------------

    def set_mode(self, gpu_index: int, enabled: bool) -> MigModeResult:
        nvml = self._calls.nvml
        handle = self._calls.handle(gpu_index)
        mode = nvml.NVML_DEVICE_MIG_ENABLE if enabled else nvml.NVML_DEVICE_MIG_DISABLE
        with self._calls.errors(f"{'enable' if enabled else 'disable'} MIG", gpu_index):
            status = int(nvml.nvmlDeviceSetMigMode(handle, mode))
            current, pending = nvml.nvmlDeviceGetMigMode(handle)
        return MigModeResult(
            gpu_index=gpu_index,
            current=bool(current),
            pending=bool(pending),
            activation_code=self._calls.code_name(status),
        )

    def create(self, gpu_index: int, profile_name: str, placement_start: int) -> MigDeviceInfo:
        nvml = self._calls.nvml
        handle = self._calls.handle(gpu_index)
        with self._calls.errors("read the GPU", gpu_index):
            parent = _text(nvml.nvmlDeviceGetUUID(handle))
            total_bytes = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
            minor = int(nvml.nvmlDeviceGetMinorNumber(handle))
        profiles = self._kept_profiles(handle, gpu_index, parent)
        profile = next((p for p in profiles if p.name == profile_name), None)
        if profile is None:
            known = ", ".join(p.name for p in profiles) or "none: the GPU has no MIG"
            raise HardwareInvalidArgument(
                f"GPU {gpu_index} of node {self._calls.node_name} has no MIG profile {profile_name!r} "
                f"(it has {known})",
                code="NVML_ERROR_INVALID_ARGUMENT",
            )
        placements = dict(self._placements(handle, profile.profile_id, gpu_index))
        if placement_start not in placements:
            valid = ", ".join(str(start) for start in sorted(placements))
            raise HardwareInvalidArgument(
                f"{profile_name} cannot start at memory slice {placement_start} on GPU {gpu_index} of node "
                f"{self._calls.node_name} (valid starts: {valid})",
                code="NVML_ERROR_INVALID_ARGUMENT",
            )
        what = f"create MIG device {profile_name} at placement {placement_start}"
        placement = nvml.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = placement_start, placements[placement_start]
        with self._calls.errors(what, gpu_index):
            gi = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(
                handle, profile.profile_id, ctypes.byref(placement)
            )
            gi_id = int(nvml.nvmlGpuInstanceGetInfo(gi).id)
        try:
            full = next(
                (
                    ci
                    for ci in self._ci_profiles(gi, gpu_index)
                    if int(ci.sliceCount) == int(profile.info.sliceCount)
                ),
                None,
            )
            if full is None:
                raise HardwareError(
                    f"{what} on GPU {gpu_index}: no compute instance profile spans the instance"
                )
            with self._calls.errors(f"{what} (compute instance)", gpu_index):
                nvml.nvmlGpuInstanceCreateComputeInstance(gi, int(full.id))
        except HardwareError:
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlGpuInstanceDestroy(gi)
            raise
        for device in self.read_devices(handle, gpu_index, parent, minor, total_bytes):
            if device.gi_id == gi_id:
                return device
        raise HardwareError(
            f"{what} on GPU {gpu_index}: created GPU instance {gi_id} has no MIG device handle"
        )

    def destroy(self, gpu_index: int, gi_id: int) -> None:
        nvml = self._calls.nvml
        handle = self._calls.handle(gpu_index)
        what = f"destroy MIG GPU instance {gi_id}"
        with self._calls.errors(what, gpu_index):
            gi = nvml.nvmlDeviceGetGpuInstanceById(handle, gi_id)
        for ci in self._compute_instances(gi, gpu_index, what):
            with self._calls.errors(f"{what} (compute instances)", gpu_index):
                nvml.nvmlComputeInstanceDestroy(ci)
        with self._calls.errors(what, gpu_index):
            nvml.nvmlGpuInstanceDestroy(gi)

    def _compute_instances(self, gi: Any, gpu_index: int, what: str) -> list[Any]:
        nvml = self._calls.nvml
        found = []
        for ci_profile in list(self._ci_profiles(gi, gpu_index)):
            with self._calls.errors(f"{what} (compute instances)", gpu_index):
                count = ctypes.c_uint(max(int(ci_profile.instanceCount), 1))
                array = (nvml.c_nvmlComputeInstance_t * count.value)()
                nvml.nvmlGpuInstanceGetComputeInstances(gi, int(ci_profile.id), array, ctypes.byref(count))
                found += [array[i] for i in range(count.value)]
        return found

    def gpu_instances(self, gpu_index: int) -> tuple[GpuInstanceInfo, ...]:
        """Every GPU instance of the GPU, those without a compute instance too, ordered by placement."""
        nvml = self._calls.nvml
        handle = self._calls.handle(gpu_index)
        found = []
        for profile in self._gi_profiles(handle, gpu_index):
            what = f"list the GPU instances of profile {profile.name}"
            with self._calls.errors(what, gpu_index):
                count = ctypes.c_uint(max(int(profile.info.instanceCount), 1))
                array = (nvml.c_nvmlGpuInstance_t * count.value)()
                nvml.nvmlDeviceGetGpuInstances(handle, profile.profile_id, array, ctypes.byref(count))
                gis = [array[i] for i in range(count.value)]
            for gi in gis:
                try:
                    with self._calls.errors(what, gpu_index):
                        info = nvml.nvmlGpuInstanceGetInfo(gi)
                    computes = len(self._compute_instances(gi, gpu_index, what))
                except HardwareError as exc:
                    if exc.code in _GONE:
                        continue  # destroyed since it was listed (another claim's unprepare, on another thread)
                    raise
                found.append(
                    GpuInstanceInfo(
                        gi_id=int(info.id),
                        profile=profile.name,
                        placement_start=int(info.placement.start),
                        placement_size=int(info.placement.size),
                        compute_instances=computes,
                    )
                )
        return tuple(sorted(found, key=lambda g: (g.placement_start, g.gi_id)))
