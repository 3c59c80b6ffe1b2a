"""The DRA CEL environment: errors with positions and hints, domain semantics, libraries, caching."""

from __future__ import annotations

import pytest
from _cel_fleet import DRIVER, FLEET_FACTORY, gpu
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudra.allocator.cel.selectors import (
    MAX_EXPRESSION_LENGTH,
    CelCompileError,
    CelDevice,
    CelRuntimeError,
    cel_device,
    compile_selector,
)

H100 = FLEET_FACTORY()["h100"]


def ok(expression: str, device: CelDevice = H100) -> bool:
    return compile_selector(expression).matches(device)


def test_syntax_error_reports_line_and_column() -> None:
    with pytest.raises(CelCompileError) as caught:
        compile_selector(
            'device.driver == "gpu.nvidia.com" &&\n  device.attributes["gpu.nvidia.com"].type =='
        )
    error = caught.value
    assert (error.line, error.column) == (2, 46)
    assert "Syntax error" in str(error)
    assert str(error).startswith("<input>:2:46:")


def test_type_errors_and_unknown_names_report_position_and_hint() -> None:
    with pytest.raises(CelCompileError) as caught:
        compile_selector('device.attributes["gpu.nvidia.com"].type == "gpu" && device.drivr == "x"')
    assert (caught.value.line, caught.value.column) == (1, 60)
    assert "driver, attributes, capacity" in caught.value.hint
    with pytest.raises(CelCompileError, match="no matching overload") as caught:
        compile_selector("1 == 'a'")
    assert "same type" in caught.value.hint
    with pytest.raises(CelCompileError, match="undeclared reference to 'nosuch'"):
        compile_selector("nosuch(1)")


def test_semver_relational_operator_is_rejected_with_compare_to_hint() -> None:
    text = 'semver("9.0.0") > semver("8.0.0")'
    with pytest.raises(CelCompileError) as caught:
        compile_selector(text)
    assert 'semver("9.0.0").compareTo(semver("8.0.0")) > 0' in caught.value.hint


def test_selector_must_be_boolean_and_not_too_long() -> None:
    with pytest.raises(CelCompileError, match="must evaluate to bool"):
        compile_selector('device.driver + "x"')
    with pytest.raises(CelCompileError, match="at most 10240"):
        compile_selector("true && " * (MAX_EXPRESSION_LENGTH // 8) + "true")
    with pytest.raises(CelRuntimeError, match="not a bool"):
        ok('device.attributes["gpu.nvidia.com"].type')


def test_invalid_literal_quantity_or_version_is_a_compile_error() -> None:
    with pytest.raises(CelCompileError, match="not a valid quantity") as caught:
        compile_selector('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40GB")) > 0')
    assert caught.value.column > 0
    with pytest.raises(CelCompileError, match="not a valid semver"):
        compile_selector('semver("v9").major() == 9')
    assert ok('semver("v9", true).major() == 9')


def test_unknown_domain_is_empty_but_unknown_attribute_is_an_error() -> None:
    assert not ok('has(device.attributes["x.example.com"].foo)')
    assert not ok('"foo" in device.attributes["x.example.com"]')
    assert ok('device.attributes["x.example.com"].size() == 0')
    assert not ok('has(device.capacity["x.example.com"].memory)')
    with pytest.raises(CelRuntimeError, match="no such key: foo"):
        ok('device.attributes["x.example.com"].foo == 1')
    with pytest.raises(CelRuntimeError, match="no such key: foo"):
        ok('device.attributes["gpu.nvidia.com"].foo == 1')
    assert ok(
        'has(device.attributes["gpu.nvidia.com"].uuid) && !has(device.attributes["gpu.nvidia.com"].foo)'
    )


def test_qualified_attributes_live_in_their_domain() -> None:
    assert ok('device.attributes["resource.kubernetes.io"].pciBusID.startsWith("0000:")')
    assert not ok('has(device.attributes["gpu.nvidia.com"].pciBusID)')


@pytest.mark.parametrize(
    "expression",
    [
        'quantity("1Gi").compareTo(quantity("1024Mi")) == 0',
        'quantity("1Gi") == quantity("1024Mi")',
        'quantity("2").isGreaterThan(quantity("1500m"))',
        'quantity("1").isLessThan(quantity("1001m"))',
        'quantity("1Gi").add(quantity("1Gi")) == quantity("2Gi")',
        'quantity("1Gi").add(1) == quantity("1073741825")',
        'quantity("1").sub(quantity("1500m")).sign() == -1',
        'quantity("1").sub(1).sign() == 0',
        'quantity("80Gi").asInteger() == 85899345920',
        '!quantity("1500m").isInteger() && quantity("2k").isInteger()',
        'quantity("1500m").asApproximateFloat() == 1.5',
        'isQuantity("40Gi") && !isQuantity("40GB")',
        'device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("79Gi"))',
        'semver("1.2.3").major() == 1 && semver("1.2.3").minor() == 2 && semver("1.2.3").patch() == 3',
        'semver("1.0.0-alpha").isLessThan(semver("1.0.0"))',
        'semver("1.10.0").compareTo(semver("1.9.0")) == 1',
        'semver("1.0.0+build") == semver("1.0.0")',
        'isSemver("1.0.0") && !isSemver("1.0") && isSemver("1.0", true)',
        'device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("535.0.0"))',
        'device.attributes["gpu.nvidia.com"].cudaComputeCapability == semver("9.0.0")',
        'device.attributes["gpu.nvidia.com"].cudaComputeCapability.major() >= 9',
        'device.attributes["gpu.nvidia.com"].cudaComputeCapability != "9.0.0"',
        'cel.bind(g, device.attributes["gpu.nvidia.com"], g.type == "gpu" && g.architecture == "Hopper")',
        'device.attributes["gpu.nvidia.com"].productName.matches("^NVIDIA (H100|H200)")',
        'device.attributes["gpu.nvidia.com"].productName.find("H[0-9]+") == "H100"',
        'device.attributes["gpu.nvidia.com"].productName.findAll("[0-9]+").size() == 3',
        'device.attributes["gpu.nvidia.com"].productName.lowerAscii().contains("hbm3")',
        'device.attributes["gpu.nvidia.com"].productName.split(" ")[1] == "H100"',
        'device.attributes["gpu.nvidia.com"].uuid.substring(0, 4).upperAscii() == "GPU-"',
        'device.attributes["gpu.nvidia.com"].architecture in ["Hopper", "Blackwell"]',
        'sets.contains(["Hopper", "Ampere"], [device.attributes["gpu.nvidia.com"].architecture])',
        "sets.intersects([1, 2], [2, 3]) && sets.equivalent([1, 2], [2, 1, 1])",
        "[3, 1, 2].max() == 3 && [1, 2].sum() == 3 && [1, 2, 3].isSorted()",
        'device.attributes["gpu.nvidia.com"].exists(k, k == "uuid")',
        'device.attributes[?"x.example.com"].orValue({}).size() == 0',
        "!device.allowMultipleAllocations",
    ],
)
def test_kubernetes_libraries(expression: str) -> None:
    assert ok(expression)


def test_runtime_errors_surface_as_cel_runtime_errors() -> None:
    with pytest.raises(CelRuntimeError, match="overflow"):
        ok("9223372036854775807 + device.attributes['gpu.nvidia.com'].uuid.size() > 0")
    with pytest.raises(CelRuntimeError, match="cannot convert"):
        ok('quantity("1500m").asInteger() == 1')
    with pytest.raises(CelRuntimeError):
        ok('device.attributes["gpu.nvidia.com"].productName.compareTo(quantity("1")) > 0')


def test_compile_is_cached_by_text() -> None:
    text = 'device.attributes["gpu.nvidia.com"].type == "gpu"'
    assert compile_selector(text) is compile_selector(text)
    assert compile_selector(text).expression == text


def test_cel_device_shapes_ignore_names_but_not_attributes() -> None:
    a = cel_device(DRIVER, gpu("gpu-0", "NVIDIA H100", "Hopper", "9.0.0", "80Gi", uuid="GPU-1"))
    b = cel_device(DRIVER, gpu("gpu-1", "NVIDIA H100", "Hopper", "9.0.0", "80Gi", uuid="GPU-1"))
    c = cel_device(DRIVER, gpu("gpu-1", "NVIDIA H100", "Hopper", "9.0.0", "80Gi", uuid="GPU-2"))
    assert a.shape_key == b.shape_key != c.shape_key
    assert a == b
    assert hash(a) == hash(b)
    assert a.attributes[DRIVER]["uuid"] == "GPU-1"
    assert (
        a.capacity[DRIVER]["memory"]
        == cel_device(DRIVER, gpu("x", "p", "a", "9.0.0", "81920Mi", uuid="u")).capacity[DRIVER]["memory"]
    )


def test_bool_and_int_attributes_do_not_share_cached_results() -> None:
    one = cel_device(DRIVER, gpu("g", "p", "a", "9.0.0", "1", uuid="u", flag={"int": 1}))
    true = cel_device(DRIVER, gpu("g", "p", "a", "9.0.0", "1", uuid="u", flag={"bool": True}))
    selector = compile_selector('device.attributes["gpu.nvidia.com"].flag == 1')
    assert selector.matches(one) is True
    assert selector.matches(true) is False


PRODUCTS = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "NVIDIA L4"]
SELECTORS = [
    'device.attributes["gpu.nvidia.com"].productName.contains("H100")',
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
    'device.attributes["gpu.nvidia.com"].cudaComputeCapability.isGreaterThan(semver("8.0.0"))',
    'device.attributes["gpu.nvidia.com"].uuid.endsWith("7")',
    'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"',
    'has(device.attributes["gpu.nvidia.com"].profile) || '
    'device.attributes["gpu.nvidia.com"].exists(k, k == "x")',
    'cel.bind(g, device.attributes["gpu.nvidia.com"], g.size() > 8)',
    'device.attributes["gpu.nvidia.com"].nvlink == true',
]

devices = st.builds(
    lambda product, cc, memory, uuid, profile, nvlink: cel_device(
        DRIVER,
        gpu(
            "gpu-0",
            product,
            "arch",
            cc,
            memory,
            uuid=f"GPU-{uuid}",
            **({"profile": {"string": profile}} if profile else {}),
            **({"nvlink": nvlink} if nvlink is not None else {}),
        ),
    ),
    st.sampled_from(PRODUCTS),
    st.sampled_from(["8.0.0", "8.9.0", "9.0.0", "9.0.0-rc.1"]),
    st.sampled_from(["24Gi", "40Gi", "40960Mi", "80Gi", "39.5Gi"]),
    st.integers(0, 20),
    st.sampled_from([None, "1g.10gb", "3g.40gb"]),
    st.sampled_from([None, {"bool": True}, {"bool": False}, {"int": 1}]),
)


def outcome(evaluate: object, device: CelDevice) -> object:
    assert callable(evaluate)
    try:
        return evaluate(device)
    except CelRuntimeError as error:
        return ("error", str(error).split(" (hint")[0])


@settings(max_examples=60, deadline=None)
@given(st.lists(devices, min_size=1, max_size=25))
def test_shape_sharing_gives_the_same_answers_as_per_device_evaluation(fleet: list[CelDevice]) -> None:
    for text in SELECTORS:
        selector = compile_selector(text)
        cached = [outcome(selector.matches, device) for device in fleet]
        reference = [outcome(selector.evaluate_with_library, device) for device in fleet]
        assert cached == reference, text
