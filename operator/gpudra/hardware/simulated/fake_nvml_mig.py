"""The MIG part of FakeNvml's call surface: MIG mode, GPU instances, compute instances, MIG device handles."""

from __future__ import annotations

import ctypes
from typing import Any

from gpudra.hardware.simulated import nvml_types as t
from gpudra.hardware.simulated.fake_nvml_base import FakeNvmlBase, deref, fill_array, locked


class MigCalls(FakeNvmlBase):
    # -- MIG mode and GPU instances --------------------------------------------------------------------------

    @locked
    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        gpu = self._full_gpu(handle)
        gpu.mig_spec()
        return [int(gpu.mig_current), int(gpu.mig_pending)]

    @locked
    def nvmlDeviceSetMigMode(self, handle: Any, mode: int) -> int:
        return self._full_gpu(handle).set_mig_mode(mode)

    @locked
    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: Any, profile: int, version: int = 2) -> Any:
        gpu = self._full_gpu(handle)
        p = gpu.profile_by_constant(profile)
        info = t.c_nvmlGpuInstanceProfileInfo_v2_t()
        info.id, info.isP2pSupported, info.sliceCount = p.profile_id, 0, p.slice_count
        info.instanceCount, info.multiprocessorCount = p.instance_count, p.multiprocessors
        info.copyEngineCount, info.decoderCount, info.encoderCount = p.copy_engines, p.decoders, p.encoders
        info.jpegCount, info.ofaCount, info.memorySizeMB = p.jpeg_engines, p.ofa_engines, p.memory_mib
        info.name = f"MIG {p.name}"
        return info

    nvmlDeviceGetGpuInstanceProfileInfoV = nvmlDeviceGetGpuInstanceProfileInfo

    @locked
    def nvmlDeviceGetGpuInstanceProfileInfoById(self, handle: Any, profile_id: int) -> Any:
        gpu = self._full_gpu(handle)
        return self.nvmlDeviceGetGpuInstanceProfileInfo(handle, gpu.profile_constant(profile_id))

    @locked
    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, handle: Any, profile_id: int) -> int:
        return self._full_gpu(handle).remaining_capacity(profile_id)

    @locked
    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, handle: Any, profile_id: int, placements_ref: Any, count_ref: Any
    ) -> int:
        found = self._full_gpu(handle).possible_placements(profile_id)
        fill_array(placements_ref, count_ref, [t.c_nvmlGpuInstancePlacement_t(s, n) for s, n in found])
        return t.NVML_SUCCESS

    @locked
    def nvmlDeviceCreateGpuInstance(self, handle: Any, profile_id: int) -> Any:
        gpu = self._full_gpu(handle)
        return self._gi_handle(gpu.index, gpu.create_gpu_instance(profile_id, None))

    @locked
    def nvmlDeviceCreateGpuInstanceWithPlacement(self, handle: Any, profile_id: int, placement: Any) -> Any:
        gpu = self._full_gpu(handle)
        wanted = deref(placement)
        gi = gpu.create_gpu_instance(profile_id, (int(wanted.start), int(wanted.size)))
        return self._gi_handle(gpu.index, gi)

    @locked
    def nvmlDeviceGetGpuInstances(
        self, handle: Any, profile_id: int, instances_ref: Any, count_ref: Any
    ) -> int:
        gpu = self._full_gpu(handle)
        gpu.profile_by_id(profile_id)
        gis = sorted(
            (gi for gi in gpu.gpu_instances.values() if gi.profile.profile_id == profile_id),
            key=lambda g: g.gi_id,
        )
        fill_array(instances_ref, count_ref, [self._gi_handle(gpu.index, gi) for gi in gis])
        return t.NVML_SUCCESS

    @locked
    def nvmlDeviceGetGpuInstanceById(self, handle: Any, gi_id: int) -> Any:
        gpu = self._full_gpu(handle)
        return self._gi_handle(gpu.index, gpu.gpu_instance(gi_id))

    @locked
    def nvmlGpuInstanceGetInfo(self, gi_handle: Any) -> Any:
        gpu, gi = self._gi(gi_handle)
        placement = t.c_nvmlGpuInstancePlacement_t(gi.start, gi.profile.placement_size)
        return t.c_nvmlGpuInstanceInfo_t(
            self._device_handle(gpu.index), gi.gi_id, gi.profile.profile_id, placement
        )

    @locked
    def nvmlGpuInstanceDestroy(self, gi_handle: Any) -> int:
        gpu, gi = self._gi(gi_handle)
        gpu.destroy_gpu_instance(gi)
        return t.NVML_SUCCESS

    # -- compute instances -----------------------------------------------------------------------------------

    @locked
    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, gi_handle: Any, profile: int, eng_profile: int = 0, version: int = 2
    ) -> Any:
        gpu, gi = self._gi(gi_handle)
        ci = gpu.ci_profile(gi, profile)
        info = t.c_nvmlComputeInstanceProfileInfo_v2_t()
        info.id, info.sliceCount, info.instanceCount = ci.constant, ci.slice_count, ci.instance_count
        info.multiprocessorCount = ci.multiprocessors
        info.sharedCopyEngineCount, info.sharedDecoderCount = gi.profile.copy_engines, gi.profile.decoders
        info.sharedEncoderCount, info.sharedJpegCount = gi.profile.encoders, gi.profile.jpeg_engines
        info.sharedOfaCount = gi.profile.ofa_engines
        info.name = f"MIG {ci.name}.{gi.profile.name}"
        return info

    nvmlGpuInstanceGetComputeInstanceProfileInfoV = nvmlGpuInstanceGetComputeInstanceProfileInfo

    @locked
    def nvmlGpuInstanceCreateComputeInstance(self, gi_handle: Any, profile_id: int) -> Any:
        gpu, gi = self._gi(gi_handle)
        return self._ci_handle(gpu.index, gpu.create_compute_instance(gi, profile_id))

    @locked
    def nvmlGpuInstanceGetComputeInstances(
        self, gi_handle: Any, profile_id: int, instances_ref: Any, count_ref: Any
    ) -> int:
        gpu, gi = self._gi(gi_handle)
        gpu.ci_profile(gi, profile_id)
        cis = sorted(
            (ci for ci in gi.cis.values() if ci.profile.constant == profile_id), key=lambda c: c.ci_id
        )
        fill_array(instances_ref, count_ref, [self._ci_handle(gpu.index, ci) for ci in cis])
        return t.NVML_SUCCESS

    @locked
    def nvmlGpuInstanceGetComputeInstanceById(self, gi_handle: Any, ci_id: int) -> Any:
        gpu, gi = self._gi(gi_handle)
        ci = gi.cis.get(ci_id)
        if ci is None:
            raise t.NVMLError_NotFound(f"GPU instance {gi.gi_id} has no compute instance {ci_id}")
        return self._ci_handle(gpu.index, ci)

    @locked
    def nvmlComputeInstanceGetInfo(self, ci_handle: Any) -> Any:
        gpu, gi, ci = self._ci(ci_handle)
        placement = t.c_nvmlComputeInstancePlacement_t(ci.start, ci.profile.slice_count)
        return t.c_nvmlComputeInstanceInfo_t(
            self._device_handle(gpu.index),
            self._gi_handle(gpu.index, gi),
            ci.ci_id,
            ci.profile.constant,
            placement,
        )

    nvmlComputeInstanceGetInfo_v2 = nvmlComputeInstanceGetInfo

    @locked
    def nvmlComputeInstanceDestroy(self, ci_handle: Any) -> int:
        gpu, gi, ci = self._ci(ci_handle)
        gpu.destroy_compute_instance(gi, ci)
        return t.NVML_SUCCESS

    # -- MIG device handles ----------------------------------------------------------------------------------

    @locked
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        """0 while MIG mode is off, as NVML documents and a recorded H100 / H200 show."""
        gpu = self._full_gpu(handle)
        return gpu.mig_spec().max_devices if gpu.mig_current else 0

    @locked
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any:
        gpu = self._full_gpu(handle)
        spec = gpu.mig_spec()
        if not 0 <= index < spec.max_devices:
            raise t.NVMLError_InvalidArgument(
                f"MIG device index {index} out of range (max {spec.max_devices})"
            )
        if not gpu.mig_current:
            raise t.NVMLError_NotSupported(f"MIG mode is disabled on GPU {gpu.index}")
        found = gpu.mig_device_at(index)
        if found is None:
            raise t.NVMLError_NotFound(f"no MIG device at index {index} of GPU {gpu.index}")
        return self._device_handle(gpu.index, found[1].serial)

    @locked
    def nvmlDeviceIsMigDeviceHandle(self, handle: Any) -> ctypes.c_uint:
        return ctypes.c_uint(int(self._resolve(handle)[1] is not None))

    @locked
    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int:
        return self._mig(handle)[1][0].gi_id

    @locked
    def nvmlDeviceGetComputeInstanceId(self, handle: Any) -> int:
        return self._mig(handle)[1][1].ci_id

    @locked
    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: Any) -> Any:
        return self._device_handle(self._mig(handle)[0].index)
