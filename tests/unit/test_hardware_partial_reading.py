"""One GPU never blanks a node: NVML calls that fail, or answer what gpudra does not know, on one GPU cost only what
they answer. The simulated NVML answers each call of each GPU with a random error or an unknown / out-of-range
value; every GPU that was not hit is still published as before, a GPU hit only in its details is published without
them, and every hit is named (GPU and call) in the inventory's problems."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudra.devices.build import build_devices
from gpudra.hardware.gpus.inventory import GpuInfo, NodeInventory
from gpudra.hardware.simulated import nvml_types as t
from gpudra.hardware.simulated import simulated_backend

ERRORS = (
    t.NVMLError_Unknown,
    t.NVMLError_NoPermission,
    t.NVMLError_Timeout,
    t.NVMLError_InvalidArgument,
    t.NVMLError_InsufficientSize,
)
NOT_SUPPORTED = t.NVMLError_NotSupported

# call -> (the GpuInfo field it fills, what that field is without it, answers that cannot be published)
DETAILS: dict[str, tuple[str, Any, st.SearchStrategy[Any]]] = {
    "nvmlDeviceGetName": (
        "product_name",
        None,
        st.one_of(st.just(""), st.text(min_size=65, max_size=80), st.just("NVIDIA\x00H100")),
    ),
    "nvmlDeviceGetBrand": ("brand", None, st.integers(17, 2**31)),
    "nvmlDeviceGetArchitecture": ("architecture", None, st.sampled_from([0, 1, 11, 12, 14, 99, 2**31])),
    "nvmlDeviceGetCudaComputeCapability": (
        "cuda_compute_capability",
        None,
        st.sampled_from([(0, 0), (-1, 5), (100, 0), (12, 100), ("x", 1), None]),
    ),
    "nvmlDeviceGetMemoryInfo": (
        "memory_bytes",
        None,
        st.sampled_from([SimpleNamespace(total=0), SimpleNamespace(total=-1), SimpleNamespace()]),
    ),
    "nvmlDeviceGetNumaNodeId": ("numa_node", None, st.sampled_from([-2, 1024, 2**31, "0"])),
    "nvmlDeviceGetAddressingMode": ("addressing_mode", None, st.integers(3, 2**31)),
    "nvmlDeviceGetFieldValues": ("nvlink_count", 0, st.nothing()),
    "nvmlDeviceGetGpuFabricInfoV": ("fabric", None, st.nothing()),
}
OPTIONAL = {"nvmlDeviceGetNumaNodeId", "nvmlDeviceGetAddressingMode", "nvmlDeviceGetFieldValues",
            "nvmlDeviceGetGpuFabricInfoV"}  # fmt: skip
"""Details a GPU may lack: NOT_SUPPORTED there is no problem."""
# calls without whose answer a GPU is not published, with answers that cannot be published
ESSENTIAL: dict[str, st.SearchStrategy[Any]] = {
    "nvmlDeviceGetHandleByIndex": st.nothing(),
    "nvmlDeviceGetUUID": st.sampled_from(["", "not-a-uuid", "GPU-" + "f" * 70]),
    "nvmlDeviceGetMinorNumber": st.sampled_from([-1, 255, 2**20, "3"]),
    "nvmlDeviceGetPciInfo": st.sampled_from([None, "0000:1a:00.0"]),
    "nvmlDeviceGetMigMode": st.sampled_from([(2, 0), (0, 7), None, "on"]),
}


@dataclass(frozen=True)
class Hit:
    gpu: int
    call: str
    error: type[t.NVMLError] | None
    value: Any


def _answer(call: str, unusable: st.SearchStrategy[Any], errors: tuple[type[t.NVMLError], ...]) -> Any:
    error = st.sampled_from(errors).map(lambda e: (e, None))
    return st.one_of(error, unusable.map(lambda v: (None, v))).map(lambda answer: (call, *answer))


def _hits(gpus: int) -> st.SearchStrategy[list[Hit]]:
    detail = [_answer(call, unusable, (*ERRORS, NOT_SUPPORTED)) for call, (_, _, unusable) in DETAILS.items()]
    essential = [_answer(call, unusable, ERRORS) for call, unusable in ESSENTIAL.items()]
    one = st.tuples(st.integers(0, gpus - 1), st.one_of(*detail, *essential))
    return st.lists(one, max_size=6, unique_by=lambda hit: (hit[0], hit[1][0])).map(
        lambda hits: [Hit(gpu, call, error, value) for gpu, (call, error, value) in hits]
    )


def _without_peers(gpu: GpuInfo) -> GpuInfo:
    """NVLink peers name the other GPUs published: one left out is no one's peer."""
    return gpu.model_copy(update={"nvlink_peers": ()})


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    profile=st.sampled_from(["dgx-a100", "dgx-h100", "l4x4", "gb200-nvl72"]),
    data=st.data(),
)
def test_every_gpu_not_hit_is_published_and_every_hit_is_named(profile: str, data: st.DataObject) -> None:
    node = simulated_backend(profile, "node-0")
    before = {gpu.index: gpu for gpu in node.backend.read_inventory().gpus}
    hits = data.draw(_hits(len(before)))
    for hit in hits:
        if hit.error is not None:
            node.nvml.inject_call(hit.call, gpu=hit.gpu, error=hit.error)
        else:
            node.nvml.inject_call(hit.call, gpu=hit.gpu, returns=hit.value)

    inventory = node.backend.read_inventory()  # never raises

    published = {gpu.index: gpu for gpu in inventory.gpus}
    for index, gpu in before.items():
        on_gpu = [hit for hit in hits if hit.gpu == index]
        essential = [hit for hit in on_gpu if hit.call in ESSENTIAL]
        memory_for_mig = gpu.mig_enabled and any(h.call == "nvmlDeviceGetMemoryInfo" for h in on_gpu)
        if essential or memory_for_mig:
            assert index not in published, (index, on_gpu)
            continue
        expected = gpu.model_copy(update={DETAILS[hit.call][0]: DETAILS[hit.call][1] for hit in on_gpu})
        assert _without_peers(published[index]) == _without_peers(expected), on_gpu
    for hit in hits:
        if hit.call in OPTIONAL and hit.error is NOT_SUPPORTED:
            continue  # the GPU has no such detail: nothing to say
        named = [p for p in inventory.problems if p.gpu_index == hit.gpu and p.call == hit.call]
        left_out = [p for p in inventory.problems if p.gpu_index == hit.gpu and not p.published]
        assert named or left_out, (hit, inventory.problems)
    assert {p.gpu_index for p in inventory.problems if not p.published} == set(before) - set(published)
    build_devices(inventory)  # and what was read can be published


def test_an_unknown_architecture_and_brand_are_left_out_of_the_devices_with_a_problem() -> None:
    node = simulated_backend("dgx-h100", "node-0")
    node.nvml.inject_call("nvmlDeviceGetArchitecture", gpu=2, returns=13 + 99)
    node.nvml.inject_call("nvmlDeviceGetBrand", gpu=2, returns=77)
    inventory = node.backend.read_inventory()
    attributes = {device.name: device.attributes or {} for device in build_devices(inventory)}
    assert len(attributes) == 8
    assert "architecture" not in attributes["gpu-2"]
    assert "brand" not in attributes["gpu-2"]
    assert attributes["gpu-3"]["architecture"].value == "Hopper"
    messages = [p.message for p in inventory.problems]
    assert any("GPU 2" in m and "nvmlDeviceGetArchitecture answered 112" in m for m in messages), messages
    assert any("GPU 2" in m and "nvmlDeviceGetBrand answered 77" in m for m in messages), messages


def test_memory_not_reported_publishes_the_gpu_without_memory_capacity() -> None:
    """GB10's unified memory: nvmlDeviceGetMemoryInfo answers NOT_SUPPORTED (NVIDIA's driver then failed)."""
    node = simulated_backend("l4x4", "node-0")
    node.nvml.inject_call("nvmlDeviceGetMemoryInfo", gpu=0, error=NOT_SUPPORTED)
    inventory: NodeInventory = node.backend.read_inventory()
    devices = {device.name: device for device in build_devices(inventory)}
    assert set(devices) == {"gpu-0", "gpu-1", "gpu-2", "gpu-3"}
    assert "memory" not in (devices["gpu-0"].capacity or {})
    assert "memory" in (devices["gpu-1"].capacity or {})
    assert [(p.gpu_index, p.call, p.published) for p in inventory.problems] == [
        (0, "nvmlDeviceGetMemoryInfo", True)
    ]


def test_an_error_on_one_gpu_leaves_the_others_published() -> None:
    node = simulated_backend("dgx-a100", "node-0")
    node.nvml.inject_call("nvmlDeviceGetUUID", gpu=5, error=t.NVMLError_Unknown)
    inventory = node.backend.read_inventory()
    assert [gpu.index for gpu in inventory.gpus] == [0, 1, 2, 3, 4, 6, 7]
    (problem,) = inventory.problems
    assert (problem.gpu_index, problem.gpu_uuid, problem.call, problem.published) == (
        5, None, "nvmlDeviceGetUUID", False,
    )  # fmt: skip
    assert problem.message.startswith("GPU 5: nvmlDeviceGetUUID failed")
    assert problem.message.endswith("not published")
