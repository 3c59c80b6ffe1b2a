"""Selectors as Python closures (gpudra.allocator.cel.celclosures) against the CEL library, and where Kubernetes
differs from the library, against Kubernetes' answer (recorded from its allocator; tests/differential asks it
live)."""

from __future__ import annotations

from random import Random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from celgrammar import A, C, device, selector
from gpudra.allocator.cel.selectors import (
    CelCompileError,
    CelDevice,
    CelRuntimeError,
    cel_device,
    compile_selector,
)
from gpudra.api.dra import Device

DEVICE = cel_device(
    "gpu.nvidia.com",
    Device.model_validate(
        {
            "name": "d0",
            "attributes": {
                "s": {"string": "abc"},
                "i": {"int": 5},
                "b": {"bool": True},
                "v": {"version": "1.2.3"},
                "v2": {"version": "1.3.0"},
                "neg": {"int": -3},
                "peers": {"strings": ["GPU-a", "GPU-b", "GPU-a"]},
                "numa": {"ints": [0, 1]},
                "flags": {"bools": [False]},
                "vs": {"versions": ["1.2.3", "2.0.0"]},
            },
            "capacity": {"memory": {"value": "80Gi"}},
        }
    ),
)


def outcome(evaluate: Any, view: CelDevice) -> object:
    try:
        return bool(evaluate(view))
    except CelRuntimeError:
        return "error"


def compiled(text: str) -> Any:
    try:
        return compile_selector(text)
    except CelCompileError:
        return None


@settings(max_examples=400, deadline=None)
@given(st.randoms(use_true_random=False))
def test_closures_give_the_library_answer_on_random_selectors_and_devices(r: Random) -> None:
    text = selector(r, library_safe=True)
    compiled_selector = compiled(text)
    if compiled_selector is None:
        return
    for i in range(8):
        view = cel_device("gpu.nvidia.com", Device.model_validate(device(r, f"d{i}")))
        closure = outcome(compiled_selector.matches, view)
        library = outcome(compiled_selector.evaluate_with_library, view)
        assert closure == library, f"{text}\non {view}"


def test_random_selectors_mostly_run_as_closures() -> None:
    """The property above exercises the closures, not the library twice: most generated selectors that
    compile are translated."""
    r = Random(7)
    selectors = [s for s in (compiled(selector(r, library_safe=True)) for _ in range(400)) if s is not None]
    assert len(selectors) > 150
    assert sum(s.translated for s in selectors) / len(selectors) > 0.9


@pytest.mark.parametrize(
    ("expression", "kubernetes"),
    [
        # The library carries a version as bytes; Kubernetes' Semver has no <, size() or +, and its == with
        # another type is an error. Quantity's == is the same. A constant list is a set lookup in cel-go,
        # which cannot hash a Semver.
        (f"{A}.v < {A}.v2", "error"),
        (f"{A}.v.size() == 5", "error"),
        (f"{A}.v + {A}.v == {A}.v", "error"),
        (f'{A}.v == "1.2.3"', "error"),
        (f"{A}.v == {A}.s", "error"),
        (f"{C}.memory == {A}.s", "error"),
        (f'{A}.v in ["1.2.3"]', "error"),
        # That lookup is a Go panic in cel-go, recovered as an internal error: it ends the evaluation, so `||` and
        # `&&` do not absorb it, unless an operand before it decides (found by tests/differential).
        (f'{A}.v in ["x"] || {A}.s == "abc"', "error"),
        (f'{A}.s == "x" || ({A}.v in ["x"] || true)', "error"),
        (f'{A}.s == "abc" || {A}.v in ["x"]', True),
        (f'{A}.s == "x" && {A}.v in ["x"]', False),
        (f"{A}.missing == 1 || {A}.v in [1]", "error"),
        # ... but the value on the left decides ==, != is never an error, and other lists ignore errors.
        (f'"1.2.3" == {A}.v', False),
        (f"{A}.s == {A}.v", False),
        (f'{A}.v != "x"', True),
        (f"{A}.v in []", False),
        (f"{A}.missing in []", False),
        (f"{A}.v in [{A}.s]", False),
        (f'{A}.v in [semver("1.2.3")]', True),
        # An unknown domain is an empty map even when its name is computed.
        ('device.attributes[device.driver + "x"].size() == 0', True),
        # A non-string key is not in a domain map.
        (f"{A}.i in {A}", False),
        # With integer division beside a double (the selector stays in the closures): cel-go's `x in []` is still
        # false without evaluating x (found by tests/differential with list-typed attributes in the grammar).
        (f"({A}.i % 2 == 1 || -1.5 >= {A}.i) && !({A}.missing in [])", True),
    ],
)
def test_closures_follow_kubernetes_where_the_library_does_not(expression: str, kubernetes: object) -> None:
    selector_ = compile_selector(expression)
    assert selector_.translated
    assert outcome(selector_.matches, DEVICE) == kubernetes


@pytest.mark.parametrize(
    ("expression", "kubernetes"),
    [
        (f'{A}.i == "x"', False),
        (f"{A}.i == 5.0", True),
        (f"{A}.i < 6.5", True),
        (f"{A}.s < 5", "error"),
        (f"{A}.missing == 1 && false", False),
        (f"{A}.missing == 1 || true", True),
        (f"{A}.i && false", False),
        (f"{A}.i && true", "error"),
        (f"!{A}.i", "error"),
        (f"({A}.i ? true : false)", "error"),
        (f"{A}.i in [5.0]", True),
        (f"{A}.b in [1]", False),
        (f"{A}.i / 0 == 1", "error"),
        (f"{A}.i % 0 == 1", "error"),
        (f"{A}.i + 9223372036854775807 > 0", "error"),
        (f"{A}.neg / 2 == -1", True),
        (f"{A}.neg % 2 == -1", True),
        (f"{A}.neg / -2 == 1", True),
        # A double elsewhere in the selector does not keep integer division out of the closures.
        (f"{A}.i / {A}.neg < 6.5", True),
        ('device.attributes["x"].s == 1', "error"),
        ('"s" in device.attributes["x"]', False),
        (f"{A}.size() == 10", True),
        (f'{A}.i.startsWith("a")', "error"),
        (f'{A}.s.compareTo(quantity("1Gi")) > 0', "error"),
        (f'{C}.memory.compareTo(quantity("80Gi")) == 0', True),
        (f"{C}.memory.add(1).isGreaterThan({C}.memory)", True),
        (f"{C}.memory.asInteger() == 85899345920", True),
        (f'{C}.missing.compareTo(quantity("1")) >= 0', "error"),
        (f"{A}.v.compareTo({A}.v2) < 0", True),
        (f"{A}.i == 5 ? {A}.b : {A}.missing", True),
        (f"semver({A}.s).major() == 1", "error"),
        (f"{A}.s.lowerAscii() == {A}.s", True),
        # DRAListTypeAttributes (k8s.io/dynamic-resource-allocation/cel includesFunc): a list includes a value
        # one of its elements equals, a scalar one it equals; an element that cannot be compared is no match.
        (f'{A}.peers.includes("GPU-b")', True),
        (f'{A}.peers.includes("GPU-c")', False),
        (f"{A}.numa.includes(1)", True),
        (f"{A}.numa.includes(1.0)", True),
        (f"{A}.flags.includes(0)", False),
        (f"{A}.flags.includes(false)", True),
        (f'{A}.vs.includes(semver("2.0.0"))', True),
        (f'{A}.vs.includes("2.0.0")', False),
        (f'{A}.s.includes("abc")', True),
        (f"{A}.i.includes(5)", True),
        (f'{A}.v.includes(semver("1.2.3"))', True),
        (f'{A}.v.includes("1.2.3")', False),
        (f"{A}.missing.includes(1)", "error"),
        (f'"GPU-a" in {A}.peers', True),
        (f"2 in {A}.numa", False),
        (f'"a" in {A}.s', "error"),
        (f"{A}.peers.size() == 3", True),
        (f"({A}.numa + {A}.numa).size() == 2 * {A}.numa.size()", True),
        (f"0 in [{A}.numa + {A}.numa, {A}.i]", False),
    ],
)
def test_closures_on_kubernetes_answers(expression: str, kubernetes: object) -> None:
    selector_ = compile_selector(expression)
    assert selector_.translated
    assert outcome(selector_.matches, DEVICE) == kubernetes
    assert outcome(selector_.evaluate_with_library, DEVICE) == kubernetes


@pytest.mark.parametrize(
    "expression",
    [
        f'{A}.s.matches("^a")',
        f'cel.bind(g, {A}, g.s == "abc")',
        f'{A}.exists(k, k == "s")',
        f'{A}[?"s"].orValue("") == "abc"',
        f"{A}.i == 5u",
        f'{A}.s.split("b").size() == 2',
        f"1.0 / 2.0 < {A}.i",
        f'{A}.peers == ["GPU-a", "GPU-b", "GPU-a"]',
        f'{A}.peers.exists(p, p == "GPU-b")',
    ],
)
def test_selectors_outside_the_translated_part_run_in_the_library(expression: str) -> None:
    selector_ = compile_selector(expression)
    assert not selector_.translated
    assert selector_.matches(DEVICE) is True


def test_a_runtime_error_names_the_key_and_the_fix() -> None:
    with pytest.raises(CelRuntimeError, match="no such key: nvlinkCount") as caught:
        compile_selector(f"{A}.nvlinkCount > 0").matches(DEVICE)
    assert "has(" in caught.value.hint
    with pytest.raises(CelRuntimeError, match="not a bool"):
        compile_selector(f"{A}.s").matches(DEVICE)
