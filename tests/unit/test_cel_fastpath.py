"""The generated fast path of common selector shapes (gpudra.allocator.celfastpath) against the closures it
stands in front of: the same answer and the same error on every device, and most answers without them."""

from __future__ import annotations

from collections.abc import Callable
from random import Random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from celgrammar import DRIVER, INTS, OTHER, QUANTITIES, STRINGS, VERSIONS, A, C, device
from gpudra.allocator.cel import CelCompileError, CelDevice, CelRuntimeError, cel_device, compile_selector
from gpudra.allocator.celclosures import CelEvalError, translate
from gpudra.allocator.celfastpath import fast_path
from gpudra.api.dra import Device

_PATHS = [
    f"{A}.s1",
    f"{A}.s2",
    f"{A}.i1",
    f"{A}.b1",
    f"{A}.m1",
    f"{A}.v1",
    f"{A}.q",
    f"{OTHER}.z",
    f'{A}["s1"]',
]
_DOMAINS = [A, OTHER, C, 'device.attributes["none.io"]']
_CAPACITIES = [f"{C}.memory", f'{C}["memory"]', 'device.capacity["other.io"].slots', f"{C}.none", f"{A}.v1"]


def _literal(r: Random) -> str:
    kind = r.randrange(3)
    if kind == 0:
        return f'"{r.choice(STRINGS)}"'
    if kind == 1:
        return str(r.choice(INTS))
    return r.choice(["true", "false"])


def _test(r: Random) -> str:
    """One operand in a shape the fast path knows (a few of them do not type-check; the caller skips those)."""
    kind = r.randrange(9)
    op = r.choice(["==", "!=", "<", "<=", ">", ">="])
    if kind == 0:
        return r.choice(
            [f'device.driver {op} "{DRIVER}"', f'"other" {op} device.driver', 'device.driver.endsWith("com")']
        )
    if kind == 1:
        return f"{r.choice(_PATHS)} {r.choice(['==', '!='])} {_literal(r)}"
    if kind == 2:
        value = r.choice([f'"{r.choice(STRINGS)}"', str(r.choice(INTS))])
        return f"{r.choice(_PATHS)} {op} {value}" if r.random() < 0.5 else f"{value} {op} {r.choice(_PATHS)}"
    if kind == 3:
        constant = r.choice([f'quantity("{r.choice(QUANTITIES)}")', f'semver("{r.choice(VERSIONS)}")'])
        return f"{r.choice(_CAPACITIES)}.compareTo({constant}) {op} {r.choice([-1, 0, 1, 2])}"
    if kind == 4:
        constant = r.choice([f'quantity("{r.choice(QUANTITIES)}")', f'semver("{r.choice(VERSIONS)}")'])
        return f"{r.choice(_CAPACITIES)}.{r.choice(['isGreaterThan', 'isLessThan'])}({constant})"
    if kind == 5:
        method = r.choice(["startsWith", "endsWith", "contains"])
        return f'{r.choice(_PATHS)}.{method}("{r.choice(STRINGS)}")'
    if kind == 6:
        return f"has({r.choice(_DOMAINS)}.{r.choice(['s1', 'v1', 'z', 'memory'])})"
    if kind == 7:
        items = r.choice([[f'"{s}"' for s in STRINGS], [str(i) for i in INTS], ['"abc"', "1"], ["true", "1"]])
        return f"{r.choice(_PATHS)} in [{', '.join(r.sample(items, r.randrange(1, 3)))}]"
    return f'"{r.choice(STRINGS)}" == {r.choice(_PATHS)}'


def _selector(r: Random) -> str:
    tests = [_test(r) for _ in range(r.randrange(1, 5))]
    return f" {r.choice(['&&', '||'])} ".join(tests)


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
    text = _selector(r)
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
        text = _selector(r)
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
