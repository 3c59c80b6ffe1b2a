"""The generated fast path of common selector shapes (gpudra.allocator.cel.celfastpath) against the closures it
stands in front of: the same answer and the same error on every device, and most answers without them."""

from __future__ import annotations

from collections.abc import Callable
from random import Random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from celgrammar import DRIVER, A, C, device, simple_selector
from gpudra.allocator.cel.celclosures import CelEvalError, translate
from gpudra.allocator.cel.celfastpath import fast_path
from gpudra.allocator.cel.selectors import (
    CelCompileError,
    CelDevice,
    CelRuntimeError,
    cel_device,
    compile_selector,
)
from gpudra.api.dra import Device


def _devices(r: Random) -> list[CelDevice]:
    return [
        cel_device(r.choice([DRIVER, DRIVER, "other.io"]), Device.model_validate(device(r, f"d{i}")))
        for i in range(8)
    ]


class _Closures:
    """The closures of a selector as the fast path's slow path, counting the devices handed to them."""

    def __init__(self, closure: Callable[[CelDevice], Any]) -> None:
        self.closure = closure
        self.calls = 0

    def __call__(self, view: CelDevice) -> bool:
        self.calls += 1
        value = self.closure(view)
        if value is not True and value is not False:
            raise CelEvalError("not a bool")
        return value


def _outcome(evaluate: Callable[[CelDevice], bool], view: CelDevice) -> object:
    try:
        return evaluate(view)
    except CelEvalError as error:
        return f"error: {error}"


def _paths(text: str) -> tuple[Callable[[CelDevice], bool], _Closures] | None:
    try:
        tree = compile_selector(text).tree
    except CelCompileError:
        return None
    assert tree is not None, text
    closure = translate(tree)
    assert closure is not None, text
    slow = _Closures(closure)
    fast = fast_path(tree, slow)
    return None if fast is None else (fast, slow)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=2**32))
def test_the_fast_path_gives_the_closures_answer_and_error(seed: int) -> None:
    r = Random(seed)  # uniform choices: hypothesis' own Random favours the first of each
    text = simple_selector(r)
    paths = _paths(text)
    if paths is None:
        return
    fast, slow = paths
    for view in _devices(r):
        assert _outcome(fast, view) == _outcome(slow, view), f"{text}\non {view}"


def test_the_fast_path_covers_the_shapes_and_decides_most_devices_alone() -> None:
    """The property above tests the fast path, not the closures twice: nearly every generated selector that
    compiles gets one (not those testing membership in a list of constants of several types), and it answers
    many devices without handing them on (the selectors compare values of mixed types on purpose, which it
    leaves to the closures)."""
    r = Random(11)
    compiled = built = evaluations = handed_on = 0
    for _ in range(300):
        text = simple_selector(r)
        try:
            compile_selector(text)
        except CelCompileError:
            continue
        compiled += 1
        paths = _paths(text)
        if paths is None:
            continue
        built += 1
        fast, slow = paths
        for view in _devices(r):
            _outcome(fast, view)
        evaluations += 8
        handed_on += slow.calls
    assert compiled > 150
    assert built / compiled > 0.85
    assert handed_on / evaluations < 0.75


DEVICE = cel_device(
    DRIVER,
    Device.model_validate(
        {
            "name": "gpu-0",
            "attributes": {
                "productName": {"string": "NVIDIA H100 80GB HBM3"},
                "uuid": {"string": "GPU-0007"},
                "cudaComputeCapability": {"version": "9.0.0"},
                "index": {"int": 0},
            },
            "capacity": {"memory": {"value": "80Gi"}},
        }
    ),
)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (f'device.driver == "{DRIVER}" && {A}.productName == "NVIDIA H100 80GB HBM3"', True),
        (f'{C}.memory.compareTo(quantity("80Gi")) >= 0 && {C}.memory.compareTo(quantity("80Gi")) < 1', True),
        (f'{A}.cudaComputeCapability.isGreaterThan(semver("8.0.0"))', True),
        (f'{A}.uuid.endsWith("7") || {A}.missing == 1', True),
        (f"{A}.index in [1, 2] || !has({A}.missing)", None),  # `!` is not a shape: the closures answer
        (f'{A}.productName == "a\\"); import os; (\\"" || {A}.productName in ["x\\n", "\'"]', False),
    ],
)
def test_selectors_get_a_fast_path_where_they_have_a_common_shape(
    expression: str, expected: bool | None
) -> None:
    selector = compile_selector(expression)
    assert selector.generated == (expected is not None)
    assert selector.matches(DEVICE) is (True if expected is None else expected)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (f'{A}.missing == "x" && device.driver == "{DRIVER}"', "no such key: missing"),
        (f'{A}.cudaComputeCapability == "9.0.0" || {A}.uuid == "x"', "no such overload"),
        (f'{A}.uuid.isGreaterThan(semver("1.0.0"))', "no such overload"),
    ],
)
def test_the_fast_path_raises_kubernetes_errors(expression: str, message: str) -> None:
    with pytest.raises(CelRuntimeError, match=message):
        compile_selector(expression).matches(DEVICE)
