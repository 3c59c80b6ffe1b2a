"""The common shapes of DRA selectors as one generated Python function each: a fast path in front of the
closures of ``celclosures``.

Most selectors are a single test, or an ``&&`` (``||``) of tests, each on one attribute or capacity named by
literals against a constant: ``device.driver == "gpu.nvidia.com"``, ``attributes[d].productName == "..."``,
``capacity[d].memory.compareTo(quantity("40Gi")) >= 0``, ``attributes[d].cc.isGreaterThan(semver("8.0.0"))``,
``attributes[d].uuid.endsWith("7")``, ``has(...)``, ``x in ["a", "b"]``. The closures spend most of their time
calling one closure per node; for these shapes :func:`fast_path` writes a single function that reads each value
with one dictionary lookup, checks its type and compares it with the constant (parsed once, when the selector is
compiled: quantities by their ``ordinal``, versions by their ``precedence``), so an evaluation is one Python call.

The function answers only where its answer is certain: a test it decides as false ends an ``&&`` (true ends an
``||``), whatever errors the other operands would raise, as in Kubernetes. Anything else (a missing attribute,
a value of another type than the constant's) hands the device to ``slow``, the closures with their exact
Kubernetes errors. Constants never become source text: the generated code names them ``c0``, ``c1``, ... and
receives them as arguments of the factory that builds the function.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType
from typing import Any

from gpudra.allocator.cel.celast import Node, flatten_calls
from gpudra.allocator.cel.celclosures import constant_value
from gpudra.allocator.cel.celtypes import Quantity, Semver
from gpudra.allocator.cel.celview import CelDevice, qualified_key

__all__ = ["fast_path"]

Matches = Callable[[CelDevice], bool]

_COMPARISONS = {"_==_": "==", "_!=_": "!=", "_<_": "<", "_<=_": "<=", "_>_": ">", "_>=_": ">="}
_MIRRORED = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_STRING_TESTS = {
    "startsWith": "{v}.startswith({c})",
    "endsWith": "{v}.endswith({c})",
    "contains": "{c} in {v}",
}
_ORDER_TESTS = {"isGreaterThan": ">", "isLessThan": "<"}
_RANK = {Quantity: "ordinal", Semver: "precedence"}  # the attribute that orders values of the type
_ATTRIBUTES, _CAPACITY = "device.attributes", "device.capacity"


@dataclass(frozen=True, slots=True)
class _Read:
    """A value the generated code reads: ``values[key]`` or ``quantities[key]``, or the driver."""

    source: str  # "values" | "quantities" | "driver"
    key: str = ""


@dataclass(frozen=True, slots=True)
class _Test:
    """One operand of the top-level ``&&`` / ``||``: ``read`` must be of type ``guard`` (else the slow path), then
    ``test`` (Python source over ``{v}`` and the constants ``{c}``, ``{n}``) is its bool. ``guard`` None: the read
    is always of the right type; a ``has()`` test reads nothing but the key."""

    read: _Read
    guard: type | None
    test: str
    constants: tuple[Any, ...] = ()
    presence: bool = False  # has(): ``key in values``


def fast_path(root: Node, slow: Matches) -> Matches | None:
    """A function giving ``slow``'s answer for every device, faster, or None when ``root`` is not of a shape it
    knows. ``slow`` must follow Kubernetes' semantics (the closures do); it runs for every device the fast path
    cannot decide."""
    conjunction = root.kind == "call" and root.name == "_&&_" and root.target is None
    disjunction = root.kind == "call" and root.name == "_||_" and root.target is None
    operands = flatten_calls(root, root.name) if conjunction or disjunction else [root]
    tests = [_test(node) for node in operands]
    if any(t is None for t in tests):
        return None
    return _generate([t for t in tests if t is not None], conjunction or not disjunction, slow)


def _path(node: Node) -> _Read | None:
    """``device.attributes["domain"].name`` / ``device.capacity["domain"]["name"]`` with literal names."""
    if node.kind == "select" and not node.test_only and node.target is not None:
        return _member(node.target, node.name)
    if node.kind == "call" and node.name == "_[_]" and node.target is None and len(node.args) == 2:
        holder, key = node.args
        if key.kind == "const" and key.name == "string" and type(key.value) is str:
            return _member(holder, key.value)
    return None


def _member(holder: Node, name: str) -> _Read | None:
    """``name`` in ``holder`` when that is ``device.attributes["domain"]`` or ``device.capacity["domain"]``: the key
    ``domain/name`` the closures read too."""
    if not (
        holder.kind == "call" and holder.name == "_[_]" and holder.target is None and len(holder.args) == 2
    ):
        return None
    root, domain = holder.args
    if not (root.kind == "ident" and root.name in (_ATTRIBUTES, _CAPACITY)):
        return None
    if not (domain.kind == "const" and domain.name == "string" and type(domain.value) is str):
        return None
    return _Read("values" if root.name == _ATTRIBUTES else "quantities", qualified_key(domain.value, name))


def _read(node: Node) -> _Read | None:
    if node.kind == "ident" and node.name == "device.driver":
        return _Read("driver")
    return _path(node)


def _constant(node: Node) -> tuple[bool, Any]:
    if node.kind == "const":
        return (True, node.value) if node.name in ("string", "int", "bool") else (False, None)
    return constant_value(node)


def _test(node: Node) -> _Test | None:
    if node.kind == "select" and node.test_only:
        read = None if node.target is None else _member(node.target, node.name)
        return None if read is None else _Test(read, None, "", presence=True)
    if node.kind != "call":
        return None
    if node.target is None and node.name in _COMPARISONS and len(node.args) == 2:
        return _comparison(_COMPARISONS[node.name], *node.args)
    if node.target is None and node.name == "@in" and len(node.args) == 2:
        return _membership(*node.args)
    if node.target is not None and len(node.args) == 1:
        return _method(node.name, node.target, node.args[0])
    return None


def _comparison(op: str, left: Node, right: Node) -> _Test | None:
    """``read OP constant`` (either side): equality of any two values of the constant's type, order of two strings
    or two ints; ``x.compareTo(constant) OP n``."""
    read, other, mirrored = _read(left), right, op
    if read is None:
        read, other, mirrored = _read(right), left, _MIRRORED[op]
    known, value = (False, None) if read is None else _constant(other)
    if read is not None and known:
        kind = type(value)
        if kind is bool and op not in ("==", "!="):
            return None
        if kind not in (str, int, bool) or (read.source == "driver" and kind is not str):
            return None
        guard = None if read.source == "driver" else kind
        return _Test(read, guard, f"{{v}} {mirrored} {{c}}", (value,))
    if left.kind == "call" and left.name == "compareTo" and left.target is not None and len(left.args) == 1:
        known, bound = _constant(right)
        if known and type(bound) is int:
            ordered = _ordered(left.target, left.args[0])
            if ordered is not None:
                read, kind, rank = ordered
                test = (
                    f"{{v}}.{_RANK[kind]} {op} {{c}}"
                    if bound == 0
                    else (f"(({{v}}.{_RANK[kind]} > {{c}}) - ({{v}}.{_RANK[kind]} < {{c}})) {op} {{n}}")
                )
                return _Test(read, kind, test, (rank, bound))
    return None


def _ordered(receiver: Node, argument: Node) -> tuple[_Read, type, Any] | None:
    """``read.method(constant)`` with a Quantity or Semver constant: the read, the type, the constant's rank."""
    read, (known, value) = _path(receiver), _constant(argument)
    if read is None or not known or type(value) not in _RANK:
        return None
    return read, type(value), getattr(value, _RANK[type(value)])


def _method(name: str, receiver: Node, argument: Node) -> _Test | None:
    if name in _ORDER_TESTS:
        ordered = _ordered(receiver, argument)
        if ordered is None:
            return None
        read, kind, rank = ordered
        return _Test(read, kind, f"{{v}}.{_RANK[kind]} {_ORDER_TESTS[name]} {{c}}", (rank,))
    if name in _STRING_TESTS:
        text, (known, value) = _read(receiver), _constant(argument)
        if text is None or not known or type(value) is not str:
            return None
        return _Test(text, None if text.source == "driver" else str, _STRING_TESTS[name], (value,))
    return None


def _membership(element: Node, container: Node) -> _Test | None:
    """``read in [constants]``, the constants all of one type (string, int or bool): a set lookup."""
    read, (known, values) = _read(element), _constant(container)
    if read is None or not known or type(values) is not tuple or not values:
        return None
    kinds = {type(v) for v in values}
    if len(kinds) != 1 or not kinds <= {str, int, bool}:
        return None
    (kind,) = kinds
    if read.source == "driver" and kind is not str:
        return None
    return _Test(read, None if read.source == "driver" else kind, "{v} in {c}", (frozenset(values),))


@functools.lru_cache(maxsize=512)
def _compiled(source: str) -> CodeType:
    """The factory's code object. Its source holds no constants, so selectors of one shape share it."""
    return compile(source, "<selector fast path>", "exec")


def _generate(tests: list[_Test], conjunction: bool, slow: Matches) -> Matches:
    """Write the function: each test in order, the first decisive answer returned."""
    lines = ["def matches(d):"]
    names: dict[str, Any] = {"slow": slow, "missing": object()}
    loaded: set[str] = set()
    for i, test in enumerate(tests):
        last = i == len(tests) - 1
        subst: dict[str, str] = {"v": "v"}
        for j, (field, value) in enumerate(zip(("c", "n"), test.constants, strict=False)):
            names[f"c{i}_{j}"] = value
            subst[field] = f"c{i}_{j}"
        source = test.read.source
        if source != "driver" and source not in loaded:
            lines.append(f"    {source} = d.{source}")
            loaded.add(source)
        if source != "driver":
            names[f"k{i}"] = test.read.key
        if test.presence:
            expression = f"k{i} in {source}"
        else:
            if source == "driver":
                lines.append("    v = d.driver")
            else:  # a subscript in a try costs less than .get() when the key is there, as it nearly always is
                lines += [
                    "    try:",
                    f"        v = {source}[k{i}]",
                    "    except KeyError:",
                    "        v = missing",
                ]
            if test.guard is not None:
                names[f"t{i}"] = test.guard
                lines.append(f"    if type(v) is not t{i}:")
                lines.append("        return slow(d)")
            expression = test.test.format(**subst)
        if last:
            lines.append(f"    return {expression}")
        elif conjunction:
            lines.append(f"    if not ({expression}):")
            lines.append("        return False")
        else:
            lines.append(f"    if {expression}:")
            lines.append("        return True")
    factory = "\n".join(
        [f"def factory({', '.join(names)}):", *("    " + line for line in lines), "    return matches"]
    )
    scope: dict[str, Any] = {}
    exec(
        _compiled(factory), scope
    )  # our own source: the constants come as the factory's arguments, never as text
    built: Matches = scope["factory"](**names)
    return built
