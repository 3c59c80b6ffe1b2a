"""Random DRA selectors and devices for the CEL tests (hypothesis strategies, and the same from a Random).

Devices carry attributes in two domains with names whose kind is fixed (``s1``/``s2`` strings, ``i1``/``i2``
ints, ``b1`` a bool, ``v1`` a version; the lists of DRAListTypeAttributes ``l1`` ints, ``l2`` strings, ``lv``
versions) or varies from device to device (``m1``: int, string, bool or a list of strings), each
present or not, plus the capacities ``memory`` and ``other.io/slots``. Selectors combine lookups of those
(present or missing, so lookups fail at runtime), comparisons across types, ``in`` (over lists of constants,
list attributes and domains), ``includes()``, ``has()``, string, quantity and semver functions, int
arithmetic (overflow, division by zero) and ``&&`` / ``||`` / ``!`` / ``?:``.

Versions appear only where the CEL library and Kubernetes agree: the library carries a version as bytes, so it
would compare two versions with ``<``, give them a ``size()`` and call ``version == "text"`` false, where
Kubernetes raises an error (``celclosures`` follows Kubernetes; tests/unit/test_cel_closures.py pins those).
``library_safe`` also leaves out ``x in []``: Kubernetes folds it to false, the library fails when ``x`` does.
"""

from __future__ import annotations

from random import Random
from typing import Any

DRIVER = "gpu.nvidia.com"
A = f'device.attributes["{DRIVER}"]'
OTHER = 'device.attributes["other.io"]'
C = f'device.capacity["{DRIVER}"]'

STRINGS = ["abc", "ab", "", "Abc", "x y", "gpu"]
INTS = [-3, 0, 1, 5, 7, 4611686018427387904]
VERSIONS = ["1.2.3", "1.3.0", "1.2.3-rc.1", "2.0.0"]
QUANTITIES = ["40Gi", "80Gi", "1500m", "0", "1"]

_SCALAR_ATTRS = [f"{A}.s1", f"{A}.s2", f"{A}.i1", f"{A}.i2", f"{A}.b1", f"{A}.m1", f"{OTHER}.z", f'{A}["s1"]']
_STRING_ATTRS = [f"{A}.s1", f"{A}.s2", f"{OTHER}.z", f"{A}.m1", f"{A}.i1"]
_INT_ATTRS = [f"{A}.i1", f"{A}.i2", f"{A}.m1"]
_DOMAINS = [A, OTHER, 'device.attributes["none.io"]']
_LIST_ATTRS = [f"{A}.l1", f"{A}.l2", f"{A}.lv", f"{A}.m1"]


def _literal(r: Random) -> str:
    kind = r.randrange(5)
    if kind == 0:
        return f'"{r.choice(STRINGS)}"'
    if kind == 1:
        return str(r.choice(INTS))
    if kind == 2:
        return r.choice(["true", "false"])
    if kind == 3:
        return r.choice(["5.0", "6.5", "-1.5"])
    return str(r.choice(INTS))


def _scalar(r: Random) -> str:
    kind = r.randrange(10)
    if kind < 5:
        return r.choice(_SCALAR_ATTRS)
    if kind == 5:
        return f"{r.choice(_STRING_ATTRS)}.size()"
    if kind == 6:
        op = r.choice(["+", "-", "*", "/", "%"])
        return (
            f"({r.choice(_INT_ATTRS)} {op} {r.choice([*_INT_ATTRS, '0', '2', '-1', '9223372036854775807'])})"
        )
    if kind == 7:
        return r.choice(
            ["device.driver", f"{r.choice(_STRING_ATTRS)}.lowerAscii()", f"-{r.choice(_INT_ATTRS)}"]
        )
    return _literal(r)


def _atom(r: Random, library_safe: bool) -> str:
    kind = r.randrange(16)
    if kind == 14:
        return f"{r.choice([*_LIST_ATTRS, *_SCALAR_ATTRS])}.includes({r.choice([_literal(r), _scalar(r)])})"
    if kind == 15:
        if r.random() < 0.5:
            return f"{r.choice([_literal(r), _scalar(r)])} in {r.choice(_LIST_ATTRS)}"
        return f"{r.choice(_LIST_ATTRS)}.size() {r.choice(['>', '=='])} {r.randrange(4)}"
    if kind < 4:
        op = r.choice(["==", "!=", "<", "<=", ">", ">="])
        return f"{_scalar(r)} {op} {_scalar(r)}"
    if kind == 4:
        return f"has({r.choice(_DOMAINS)}.{r.choice(['s1', 'i1', 'v1', 'z', 'q'])})"
    if kind == 5:
        items = ", ".join(_literal(r) for _ in range(r.randrange(1 if library_safe else 0, 4)))
        return f"{_scalar(r)} in [{items}]"
    if kind == 6:
        return f'"{r.choice(["s1", "z", "v1", "q"])}" in {r.choice(_DOMAINS)}'
    if kind == 7:
        method = r.choice(["startsWith", "endsWith", "contains"])
        return f'{r.choice(_STRING_ATTRS)}.{method}("{r.choice(STRINGS)}")'
    if kind == 8:
        return _quantity(r)
    if kind == 9:
        return _version(r)
    if kind == 10:
        return f"{r.choice(_DOMAINS)}.size() {r.choice(['>', '=='])} {r.randrange(4)}"
    if kind == 11:
        return r.choice([f"{A}.b1", f"{A}.m1", f"{A}.i1", "device.allowMultipleAllocations", "true", "false"])
    if kind == 12:
        return f'device.driver == "{r.choice([DRIVER, "other"])}"'
    return f"{_scalar(r)} in [{_scalar(r)}, {_scalar(r)}]"


def _quantity(r: Random) -> str:
    q = f'quantity("{r.choice(QUANTITIES)}")'
    target = r.choice([f"{C}.memory", 'device.capacity["other.io"].slots', f"{C}.none"])
    kind = r.randrange(6)
    if kind == 0:
        return f"{target}.compareTo({q}) {r.choice(['>=', '<', '=='])} {r.choice([0, 1, -1])}"
    if kind == 1:
        return f"{target}.{r.choice(['isGreaterThan', 'isLessThan'])}({q})"
    if kind == 2:
        return f"{target} == {q}"
    if kind == 3:
        return f"{target}.asInteger() > {r.choice(INTS)}"
    if kind == 4:
        return f"{target}.isInteger()"
    return f'{target}.add({r.choice([1, -2])}).sub({q}).isGreaterThan(quantity("0"))'


def _version(r: Random) -> str:
    v = f'semver("{r.choice(VERSIONS)}")'
    target = r.choice([f"{A}.v1", f"{A}.v1", f"{A}.s1", f"{OTHER}.v1"])
    kind = r.randrange(5)
    if kind == 0:
        return f"{target}.compareTo({v}) {r.choice(['>=', '<', '=='])} 0"
    if kind == 1:
        return f"{target}.{r.choice(['isGreaterThan', 'isLessThan'])}({v})"
    if kind == 2:
        return f"{target} {r.choice(['==', '!='])} {v}"
    if kind == 3:
        return f"{target}.{r.choice(['major', 'minor', 'patch'])}() == {r.randrange(3)}"
    return f"{target} in [{v}]"


def selector(r: Random, depth: int = 0, *, library_safe: bool = False) -> str:
    """One random selector expression (it may not type-check: callers skip those)."""
    kind = r.randrange(8) if depth < 3 else 0

    def sub() -> str:
        return selector(r, depth + 1, library_safe=library_safe)

    if kind < 3:
        return _atom(r, library_safe)
    if kind == 3:
        return f"({sub()} && {sub()})"
    if kind == 4:
        return f"({sub()} || {sub()})"
    if kind == 5:
        return f"!({sub()})"
    if kind == 6:
        return f"({sub()} ? {sub()} : {sub()})"
    return " && ".join(sub() for _ in range(3))


_SIMPLE_PATHS = [
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
_SIMPLE_DOMAINS = [A, OTHER, C, 'device.attributes["none.io"]']
_SIMPLE_CAPACITIES = [
    f"{C}.memory",
    f'{C}["memory"]',
    'device.capacity["other.io"].slots',
    f"{C}.none",
    f"{A}.v1",
]


def _simple_literal(r: Random) -> str:
    kind = r.randrange(3)
    if kind == 0:
        return f'"{r.choice(STRINGS)}"'
    if kind == 1:
        return str(r.choice(INTS))
    return r.choice(["true", "false"])


def _simple_test(r: Random) -> str:
    """One operand in a shape the fast path knows (a few of them do not type-check; the caller skips those)."""
    kind = r.randrange(9)
    op = r.choice(["==", "!=", "<", "<=", ">", ">="])
    if kind == 0:
        return r.choice(
            [f'device.driver {op} "{DRIVER}"', f'"other" {op} device.driver', 'device.driver.endsWith("com")']
        )
    if kind == 1:
        return f"{r.choice(_SIMPLE_PATHS)} {r.choice(['==', '!='])} {_simple_literal(r)}"
    if kind == 2:
        value = r.choice([f'"{r.choice(STRINGS)}"', str(r.choice(INTS))])
        return (
            f"{r.choice(_SIMPLE_PATHS)} {op} {value}"
            if r.random() < 0.5
            else f"{value} {op} {r.choice(_SIMPLE_PATHS)}"
        )
    if kind == 3:
        constant = r.choice([f'quantity("{r.choice(QUANTITIES)}")', f'semver("{r.choice(VERSIONS)}")'])
        return f"{r.choice(_SIMPLE_CAPACITIES)}.compareTo({constant}) {op} {r.choice([-1, 0, 1, 2])}"
    if kind == 4:
        constant = r.choice([f'quantity("{r.choice(QUANTITIES)}")', f'semver("{r.choice(VERSIONS)}")'])
        return f"{r.choice(_SIMPLE_CAPACITIES)}.{r.choice(['isGreaterThan', 'isLessThan'])}({constant})"
    if kind == 5:
        method = r.choice(["startsWith", "endsWith", "contains"])
        return f'{r.choice(_SIMPLE_PATHS)}.{method}("{r.choice(STRINGS)}")'
    if kind == 6:
        return f"has({r.choice(_SIMPLE_DOMAINS)}.{r.choice(['s1', 'v1', 'z', 'memory'])})"
    if kind == 7:
        items = r.choice([[f'"{s}"' for s in STRINGS], [str(i) for i in INTS], ['"abc"', "1"], ["true", "1"]])
        return f"{r.choice(_SIMPLE_PATHS)} in [{', '.join(r.sample(items, r.randrange(1, 3)))}]"
    return f'"{r.choice(STRINGS)}" == {r.choice(_SIMPLE_PATHS)}'


def simple_selector(r: Random) -> str:
    """A selector of the shapes ``celfastpath`` generates a function for: an ``&&`` or ``||`` of one to four tests,
    each of one attribute or capacity against a constant, of any type (it may not type-check: callers skip those)."""
    tests = [_simple_test(r) for _ in range(r.randrange(1, 5))]
    return f" {r.choice(['&&', '||'])} ".join(tests)


def _some(r: Random, values: list[Any]) -> list[Any]:
    """A list attribute's values: one to three, duplicates possible."""
    return [r.choice(values) for _ in range(r.randrange(1, 4))]


def device(r: Random, name: str = "d0") -> dict[str, Any]:
    """One random device in resource.k8s.io/v1 wire form."""
    candidates: dict[str, dict[str, Any]] = {
        "s1": {"string": r.choice(STRINGS)},
        "s2": {"string": r.choice(STRINGS)},
        "i1": {"int": r.choice(INTS)},
        "i2": {"int": r.choice(INTS)},
        "b1": {"bool": r.random() < 0.5},
        "v1": {"version": r.choice(VERSIONS)},
        "m1": r.choice(
            [
                {"int": r.choice(INTS)},
                {"string": r.choice(STRINGS)},
                {"bool": True},
                {"strings": _some(r, STRINGS)},
            ]
        ),
        "l1": {"ints": _some(r, INTS)},
        "l2": {"strings": _some(r, STRINGS)},
        "lv": {"versions": _some(r, VERSIONS)},
        "other.io/z": {"string": r.choice(STRINGS)},
        "other.io/v1": {"version": r.choice(VERSIONS)},
    }
    attributes = {k: v for k, v in candidates.items() if r.random() < 0.8}
    capacity = {}
    if r.random() < 0.8:
        capacity["memory"] = {"value": r.choice(QUANTITIES)}
    if r.random() < 0.5:
        capacity["other.io/slots"] = {"value": "2"}
    out: dict[str, Any] = {"name": name, "attributes": attributes, "capacity": capacity}
    return out
