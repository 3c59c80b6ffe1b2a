"""The simulated NVML answers like NVML: same constants and error codes as pynvml, real MIG rules, events."""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import pynvml
import pytest

from gpudra.hardware.simulated import FakeNvml
from gpudra.hardware.simulated import nvml_types as t

# A100 profile ids (info.id): 1g.5gb 19, 1g.5gb+me 20, 2g.10gb 14, 3g.20gb 9, 4g.20gb 5, 7g.40gb 0.
A100_1G, A100_1G_ME, A100_2G, A100_3G, A100_7G = 19, 20, 14, 9, 0


def _node(profile: str, node_name: str = "node-0", **kwargs: Any) -> FakeNvml:
    nvml = FakeNvml.from_profile(profile, node_name=node_name, **kwargs)
    nvml.nvmlInit()
    return nvml


def _empty_a100() -> tuple[FakeNvml, Any]:
    """An A100 with MIG enabled and no instances (the dgx-a100 profile's layout destroyed)."""
    nvml = _node("dgx-a100")
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    for gi in list(nvml.gpu(0).gpu_instances.values()):
        gi_handle = nvml.nvmlDeviceGetGpuInstanceById(handle, gi.gi_id)
        for ci in list(gi.cis.values()):
            nvml.nvmlComputeInstanceDestroy(nvml.nvmlGpuInstanceGetComputeInstanceById(gi_handle, ci.ci_id))
        nvml.nvmlGpuInstanceDestroy(gi_handle)
    return nvml, handle


def _place(nvml: FakeNvml, handle: Any, profile_id: int, start: int, size: int) -> Any:
    placement = nvml.c_nvmlGpuInstancePlacement_t(start, size)
    return nvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile_id, ctypes.byref(placement))


# -- the binding's shape -------------------------------------------------------------------------------------


def test_constants_and_error_codes_match_pynvml() -> None:
    names = [n for n in vars(t) if n.startswith(("NVML_", "nvmlEventType", "nvmlGpuFabricInfo_v2"))]
    assert len(names) > 100
    for name in names:
        assert getattr(t, name) == getattr(pynvml, name), name


def test_error_classes_match_pynvml_names_and_codes() -> None:
    for name in [n for n in vars(t) if n.startswith("NVMLError_")]:
        fake_class, real_class = getattr(t, name), getattr(pynvml, name)
        assert fake_class().value == real_class().value, name
    error = t.NVMLError(t.NVML_ERROR_INSUFFICIENT_RESOURCES, "no room")
    assert isinstance(error, t.NVMLError_InsufficientResources)
    assert error.value == 23
    assert "no room" in str(error)
    assert t.NVMLError_InUse("busy").value == pynvml.NVML_ERROR_IN_USE


def test_structures_have_pynvml_field_names() -> None:
    for name in (
        "c_nvmlGpuInstancePlacement_t",
        "c_nvmlGpuInstanceProfileInfo_v2_t",
        "c_nvmlGpuInstanceInfo_t",
        "c_nvmlComputeInstanceProfileInfo_v2_t",
        "c_nvmlComputeInstanceInfo_t",
        "c_nvmlDeviceAttributes",
        "c_nvmlGpuFabricInfo_v2_t",
        "c_nvmlMemory_t",
        "nvmlPciInfo_t",
        "c_nvmlEventData_t",
        "c_nvmlFieldValue_t",
    ):
        fake_fields = [f[0] for f in getattr(t, name)._fields_]
        real_fields = [f[0] for f in getattr(pynvml, name)._fields_]
        assert fake_fields == real_fields, name


def test_calls_before_init_fail_uninitialized() -> None:
    nvml = FakeNvml.from_profile("l4x4", node_name="n")
    with pytest.raises(t.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()


def test_node_is_deterministic_from_its_name() -> None:
    a, b, c = _node("dgx-a100", "n-1"), _node("dgx-a100", "n-1"), _node("dgx-a100", "n-2")

    def uuids(nvml: FakeNvml) -> list[str]:
        handle = nvml.nvmlDeviceGetHandleByIndex(3)
        migs = [nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i) for i in range(4)]
        return [nvml.nvmlDeviceGetUUID(handle)] + [nvml.nvmlDeviceGetUUID(m) for m in migs]

    assert uuids(a) == uuids(b)
    assert set(uuids(a)).isdisjoint(uuids(c))
    assert uuids(a)[0].startswith("GPU-")
    assert all(u.startswith("MIG-") for u in uuids(a)[1:])


def test_pci_info_is_shaped_like_nvml() -> None:
    nvml = _node("dgx-h100")
    info = nvml.nvmlDeviceGetPciInfo(nvml.nvmlDeviceGetHandleByIndex(0))
    assert info.busId == "00000000:1B:00.0"
    assert info.pciDeviceId == 0x233010DE


# -- MIG rules -----------------------------------------------------------------------------------------------


def test_invalid_placement_fails_invalid_argument() -> None:
    nvml, handle = _empty_a100()
    with pytest.raises(t.NVMLError) as caught:
        _place(nvml, handle, A100_3G, 2, 4)
    assert caught.value.value == pynvml.NVML_ERROR_INVALID_ARGUMENT
    with pytest.raises(t.NVMLError_InvalidArgument):
        _place(nvml, handle, A100_1G, 7, 1)  # slot 7 is never a 1g placement


def test_overlapping_creation_fails_insufficient_resources() -> None:
    nvml, handle = _empty_a100()
    _place(nvml, handle, A100_3G, 0, 4)
    with pytest.raises(t.NVMLError) as caught:
        _place(nvml, handle, A100_2G, 2, 2)
    assert caught.value.value == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
    _place(nvml, handle, A100_3G, 4, 4)  # 3g@0 + 3g@4 is valid


def test_second_media_extension_instance_fails() -> None:
    nvml, handle = _empty_a100()
    _place(nvml, handle, A100_1G_ME, 0, 1)
    with pytest.raises(t.NVMLError_InsufficientResources):
        _place(nvml, handle, A100_1G_ME, 1, 1)
    # A30: 1g+me and 2g+me do not overlap, but there is one optical-flow engine
    a30 = _node("a30x4")
    a30_handle = a30.nvmlDeviceGetHandleByIndex(0)
    assert a30.nvmlDeviceSetMigMode(a30_handle, a30.NVML_DEVICE_MIG_ENABLE) == a30.NVML_SUCCESS
    _place(a30, a30_handle, 21, 0, 1)
    with pytest.raises(t.NVMLError_InsufficientResources):
        _place(a30, a30_handle, 6, 2, 2)


def test_per_profile_instance_count_and_compute_slices() -> None:
    nvml, handle = _empty_a100()
    for start in (0, 2, 4, 6):
        _place(nvml, handle, 15, start, 2)  # 1g.10gb: 4 instances fill the 8 memory slices
    assert nvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, A100_1G) == 0
    nvml2, handle2 = _empty_a100()
    assert nvml2.nvmlDeviceGetGpuInstanceRemainingCapacity(handle2, A100_1G) == 7
    _place(nvml2, handle2, A100_3G, 4, 4)
    assert nvml2.nvmlDeviceGetGpuInstanceRemainingCapacity(handle2, A100_1G) == 4


def test_destroying_a_gpu_instance_with_compute_instances_fails_in_use() -> None:
    nvml, handle = _empty_a100()
    gi = _place(nvml, handle, A100_2G, 0, 2)
    ci = nvml.nvmlGpuInstanceCreateComputeInstance(gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE)
    with pytest.raises(t.NVMLError) as caught:
        nvml.nvmlGpuInstanceDestroy(gi)
    assert caught.value.value == pynvml.NVML_ERROR_IN_USE
    nvml.nvmlComputeInstanceDestroy(ci)
    nvml.nvmlGpuInstanceDestroy(gi)
    assert nvml.gpu(0).gpu_instances == {}


def test_creation_order_matters_without_placement() -> None:
    nvml, handle = _empty_a100()
    nvml.nvmlDeviceCreateGpuInstance(handle, A100_1G)
    nvml.nvmlDeviceCreateGpuInstance(handle, A100_1G)
    nvml.nvmlDeviceCreateGpuInstance(handle, A100_2G)
    with pytest.raises(t.NVMLError_InsufficientResources):
        nvml.nvmlDeviceCreateGpuInstance(handle, A100_3G)

    nvml, handle = _empty_a100()
    for profile_id in (A100_3G, A100_1G, A100_2G, A100_1G):
        nvml.nvmlDeviceCreateGpuInstance(handle, profile_id)
    assert len(nvml.gpu(0).gpu_instances) == 4


def test_gpu_instance_ids_follow_the_hardware_numbering() -> None:
    nvml, handle = _empty_a100()
    gi = nvml.nvmlDeviceCreateGpuInstance(handle, A100_1G)  # NVML fills from the top
    info = nvml.nvmlGpuInstanceGetInfo(gi)
    assert (info.id, info.profileId, info.placement.start, info.placement.size) == (13, A100_1G, 6, 1)
    info = nvml.nvmlGpuInstanceGetInfo(_place(nvml, handle, A100_3G, 0, 4))
    assert info.id == 1


def test_possible_placements_fill_a_ctypes_array() -> None:
    nvml, handle = _empty_a100()
    count = ctypes.c_uint(0)
    nvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, A100_2G, None, ctypes.byref(count))
    assert count.value == 3
    array = (nvml.c_nvmlGpuInstancePlacement_t * count.value)()
    nvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, A100_2G, array, ctypes.byref(count))
    assert [(p.start, p.size) for p in array] == [(0, 2), (2, 2), (4, 2)]
    small = ctypes.c_uint(1)
    with pytest.raises(t.NVMLError_InsufficientSize):
        nvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, A100_2G, array, ctypes.byref(small))


def test_profile_info_names_and_unsupported_profiles() -> None:
    nvml, handle = _empty_a100()
    info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1)
    assert (info.id, info.name, info.memorySizeMB, info.ofaCount) == (A100_1G_ME, "MIG 1g.5gb+me", 4864, 1)
    with pytest.raises(t.NVMLError_NotSupported):
        nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX)


def test_gpu_without_mig_answers_not_supported() -> None:
    nvml = _node("l4x4")
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(t.NVMLError) as caught:
        nvml.nvmlDeviceGetMigMode(handle)
    assert caught.value.value == pynvml.NVML_ERROR_NOT_SUPPORTED
    with pytest.raises(t.NVMLError_NotSupported):
        nvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_ENABLE)
    with pytest.raises(t.NVMLError_NotSupported):
        nvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(nvml.c_nvmlGpuFabricInfoV_t()))


def test_mig_calls_need_mig_mode_enabled() -> None:
    nvml = _node("dgx-h100")
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetMigMode(handle) == [0, 0]
    with pytest.raises(t.NVMLError_NotSupported):
        nvml.nvmlDeviceCreateGpuInstance(handle, 19)


def test_mig_mode_change_waits_for_reset_while_processes_run() -> None:
    nvml = _node("dgx-h100")
    handle = nvml.nvmlDeviceGetHandleByIndex(1)
    nvml.set_processes(1, 2)
    assert nvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_ENABLE) == pynvml.NVML_ERROR_IN_USE
    assert nvml.nvmlDeviceGetMigMode(handle) == [0, 1]
    with pytest.raises(t.NVMLError_InUse):
        nvml.reset_gpu(1)
    nvml.set_processes(1, 0)
    nvml.reset_gpu(1)
    assert nvml.nvmlDeviceGetMigMode(handle) == [1, 1]
    nvml.require_reset_for_mig_change(1)
    assert (
        nvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_DISABLE) == pynvml.NVML_ERROR_RESET_REQUIRED
    )
    assert nvml.nvmlDeviceGetMigMode(handle) == [1, 0]


def test_disabling_mig_with_instances_fails_in_use() -> None:
    nvml = _node("dgx-a100")
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(t.NVMLError_InUse):
        nvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_DISABLE)


def test_mig_device_handles_are_sparse_and_point_back_to_their_gpu() -> None:
    nvml = _node("dgx-a100")
    handle = nvml.nvmlDeviceGetHandleByIndex(2)
    assert nvml.nvmlDeviceGetMaxMigDeviceCount(handle) == 7
    mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0)
    assert nvml.nvmlDeviceIsMigDeviceHandle(mig)
    assert not nvml.nvmlDeviceIsMigDeviceHandle(handle)
    parent = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
    assert nvml.nvmlDeviceGetUUID(parent) == nvml.nvmlDeviceGetUUID(handle)
    with pytest.raises(t.NVMLError_NotFound):
        nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 4)
    assert nvml.nvmlDeviceGetHandleByUUID(nvml.nvmlDeviceGetUUID(mig).encode())


# -- fabric, events, lost GPUs -------------------------------------------------------------------------------


def test_fabric_info_of_hgx_h100_has_no_clique() -> None:
    nvml = _node("dgx-h100")
    info = nvml.c_nvmlGpuFabricInfoV_t()
    nvml.nvmlDeviceGetGpuFabricInfoV(nvml.nvmlDeviceGetHandleByIndex(0), ctypes.byref(info))
    assert (info.state, info.status, bytes(info.clusterUuid)) == (3, 0, bytes(16))


def test_xid_reaches_a_registered_event_set_and_timeouts_raise() -> None:
    nvml = _node("dgx-h100")
    handle = nvml.nvmlDeviceGetHandleByIndex(5)
    event_set = nvml.nvmlEventSetCreate()
    nvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, event_set)
    with pytest.raises(t.NVMLError_Timeout):
        nvml.nvmlEventSetWait(event_set, 0)
    assert nvml.inject_xid(4, 79) == 0  # GPU 4 is not watched
    assert nvml.inject_xid(5, 48) == 1
    data = nvml.nvmlEventSetWait(event_set, 0)
    assert (data.eventType, data.eventData, data.gpuInstanceId) == (
        pynvml.nvmlEventTypeXidCriticalError,
        48,
        0xFFFFFFFF,
    )
    assert nvml.nvmlDeviceGetUUID(data.device) == nvml.nvmlDeviceGetUUID(handle)
    nvml.nvmlEventSetFree(event_set)


def test_a_waiting_thread_gets_an_event_injected_by_another() -> None:
    nvml = _node("l4x4")
    event_set = nvml.nvmlEventSetCreate()
    nvml.nvmlDeviceRegisterEvents(
        nvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlEventTypeXidCriticalError, event_set
    )
    received: list[int] = []
    waiter = threading.Thread(
        target=lambda: received.append(nvml.nvmlEventSetWait(event_set, 60_000).eventData)
    )
    waiter.start()
    nvml.nvmlDeviceGetCount()  # the waiter does not hold the library lock
    nvml.inject_xid(0, 31)
    waiter.join(60)
    assert received == [31]


def test_lost_gpu_fails_its_calls_and_the_next_event_wait() -> None:
    nvml = _node("dgx-h100")
    handle = nvml.nvmlDeviceGetHandleByIndex(2)
    event_set = nvml.nvmlEventSetCreate()
    nvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, event_set)
    nvml.lose_gpu(2)
    with pytest.raises(t.NVMLError) as caught:
        nvml.nvmlEventSetWait(event_set, 0)
    assert caught.value.value == pynvml.NVML_ERROR_GPU_IS_LOST
    with pytest.raises(t.NVMLError_GpuIsLost):
        nvml.nvmlDeviceGetUUID(handle)
    assert nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(3)).startswith("GPU-")


def test_concurrent_mig_changes_on_different_gpus_stay_consistent() -> None:
    nvml = _node("dgx-h100")
    for index in range(4):
        nvml.nvmlDeviceSetMigMode(nvml.nvmlDeviceGetHandleByIndex(index), pynvml.NVML_DEVICE_MIG_ENABLE)
    failures: list[BaseException] = []

    def churn(index: int) -> None:
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            for _ in range(25):
                gi = nvml.nvmlDeviceCreateGpuInstance(handle, 19)
                ci = nvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)
                nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0)
                nvml.nvmlComputeInstanceDestroy(ci)
                nvml.nvmlGpuInstanceDestroy(gi)
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=churn, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert failures == []
    assert all(nvml.gpu(i).gpu_instances == {} for i in range(4))
