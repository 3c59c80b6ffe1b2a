"""Every selector from the seed articles against hand-built NVIDIA devices.

| seed | selector as published | treatment |
|---|---|---|
| 001 DeviceClass high-memory-gpu | `device.driver == "gpu.nvidia.com" && device.capacity["gpu.nvidia.com"].memory >= quantity("40Gi")` | rejected like Kubernetes; hint names compareTo |
| 001 training-gpu claim | `device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB"` | as is |
| 001 mig large-slice / small-slice | `device.attributes["gpu.nvidia.com"].profile == "3g.40gb"` / `"1g.10gb"` | as is |
| 001 prose "compute capability >= 8" | (no selector given) | written with semver compareTo |
| 002 DeviceClass nvidia-h100 | `device.driver == "nvidia.com" && device.attributes["model"].string == "H100"` | rejected (v1beta1-era typed accessor); hint |
| 002 training-gpus claim | `device.attributes["memory"].quantity >= quantity("80Gi") && device.attributes["nvlink"].bool == true` | rejected; hint shows capacity + compareTo |
| 002 MIG claim | `device.attributes["migProfile"].string == "1g.10gb"` | rejected; adapted to `profile == "1g.10gb"` |
| 000 example driver | `device.attributes["resource-driver.example.com"].gpu.memory >= "10gi" && ...num.cores >= "2"` | rejected (no dotted attributes); adapted to capacity |
"""  # noqa: E501 -- the seed selectors are quoted verbatim, one per row

from __future__ import annotations

import pytest
from _cel_fleet import fleet

from gpudra.allocator.cel.selectors import CelCompileError, CelDevice, CelRuntimeError, compile_selector

FLEET = fleet()


MIG_CLASS = 'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "mig"'


def selected(expression: str, devices: dict[str, CelDevice] = FLEET) -> set[str]:
    """Devices the selector picks; like the allocator, a claim's selectors run only on devices of its class
    (here: MIG requests run on MIG devices, whose `profile` full GPUs do not have)."""
    selector = compile_selector(expression)
    if "profile" in expression:
        mig_class = compile_selector(MIG_CLASS)
        devices = {key: device for key, device in devices.items() if mig_class.matches(device)}
    return {key for key, device in devices.items() if selector.matches(device)}


ALL = set(FLEET)

ACCEPTED = [
    # seed 001, adapted: the Kubernetes form of `memory >= quantity("40Gi")`
    (
        'device.driver == "gpu.nvidia.com" && '
        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
        {"h100", "a100-40", "a100-80", "mig-3g"},
    ),
    ('device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB"', {"a100-80"}),
    ('device.attributes["gpu.nvidia.com"].profile == "3g.40gb"', {"mig-3g"}),
    ('device.attributes["gpu.nvidia.com"].profile == "1g.10gb"', {"mig-1g"}),
    (
        'device.attributes["gpu.nvidia.com"].cudaComputeCapability.compareTo(semver("8.0.0")) >= 0',
        ALL,
    ),
    (
        'device.attributes["gpu.nvidia.com"].cudaComputeCapability.isGreaterThan(semver("8.0.0"))',
        {"h100", "l4", "mig-1g", "mig-3g"},
    ),
    # seed 002, adapted: an H100 class and an 80 GiB claim in v1 form
    (
        'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu" && '
        'device.attributes["gpu.nvidia.com"].productName.contains("H100")',
        {"h100"},
    ),
    ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0', {"h100", "a100-80"}),
    # seed 000, adapted to NVIDIA's capacity name
    ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("10Gi")) >= 0', ALL),
    # NVIDIA's own DeviceClasses
    (
        'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu"',
        ALL - {"mig-1g", "mig-3g"},
    ),
    (
        'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "mig"',
        {"mig-1g", "mig-3g"},
    ),
]


@pytest.mark.parametrize(("expression", "expected"), ACCEPTED)
def test_seed_selectors_select_the_right_devices(expression: str, expected: set[str]) -> None:
    assert selected(expression) == expected


REJECTED = [
    (
        'device.driver == "gpu.nvidia.com" && device.capacity["gpu.nvidia.com"].memory >= quantity("40Gi")',
        (1, 79),
        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
    ),
    (
        'device.driver == "nvidia.com" &&\ndevice.attributes["model"].string == "H100"',
        (2, 27),
        'device.attributes["gpu.nvidia.com"].model',
    ),
    (
        'device.attributes["memory"].quantity >= quantity("80Gi") &&\n'
        'device.attributes["nvlink"].bool == true',
        (1, 28),
        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0',
    ),
    (
        'device.attributes["migProfile"].string == "1g.10gb"',
        (1, 32),
        'device.attributes["gpu.nvidia.com"].migProfile',
    ),
    (
        'device.attributes["resource-driver.example.com"].gpu.memory >= "10gi" &&\n'
        'device.attributes["resource-driver.example.com"].num.cores >= "2"',
        (1, 53),
        'device.attributes["resource-driver.example.com"].gpu',
    ),
]


@pytest.mark.parametrize(("expression", "where", "fix"), REJECTED)
def test_non_v1_seed_forms_are_rejected_with_the_fix(
    expression: str, where: tuple[int, int], fix: str
) -> None:
    with pytest.raises(CelCompileError) as caught:
        compile_selector(expression)
    assert (caught.value.line, caught.value.column) == where
    assert fix in caught.value.hint
    assert f"<input>:{where[0]}:{where[1]}:" in str(caught.value)


def test_an_attribute_the_device_lacks_is_a_runtime_error_not_a_mismatch() -> None:
    selector = compile_selector('device.attributes["gpu.nvidia.com"].profile == "1g.10gb"')
    with pytest.raises(CelRuntimeError, match="no such key: profile") as caught:
        selector.matches(FLEET["h100"])
    assert "has(" in caught.value.hint
    guarded = (
        'has(device.attributes["gpu.nvidia.com"].profile) && '
        'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'
    )
    assert {key for key, device in FLEET.items() if compile_selector(guarded).matches(device)} == {"mig-1g"}
