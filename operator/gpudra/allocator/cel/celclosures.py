"""DRA selectors as Python closures: the checked CEL syntax tree translated once, evaluated with Kubernetes'
semantics.

The CEL library evaluates a selector in about 3 to 10 microseconds per device, most of it crossing into C++ and
back. The selectors users write stay within a small part of CEL: attribute and capacity lookups, comparisons,
``in``, ``&&``, ``||``, ``!``, ``has()``, quantity and semver methods, a few string functions. :func:`translate`
turns such a tree into nested closures over a :class:`CelDevice` (constants folded), and returns None for
anything else, which the CEL library then evaluates.

The closures follow Kubernetes (cel-go with the Kubernetes libraries), checked against its allocator
(tests/differential), where the library differs:

* ``==`` asks the left value: a Semver or Quantity on the left of ``==`` with a value of another type is an
  error ("no such overload"), any other value compares unequal to a value of another type (numbers compare
  across int and double). ``!=`` is never an error on its own: it is true whenever ``==`` is not true.
* ``x in [constant, ...]`` looks ``x`` up in a set of the constants, as cel-go's planner does: a Semver cannot
  be looked up there (an error); otherwise types must agree, numbers across int and double. Other lists
  compare ``x`` with each element and ignore the errors.
* A list attribute (DRAListTypeAttributes) is a tuple: ``x in list`` and ``list.includes(x)`` compare ``x`` with
  each element and ignore the errors, ``includes`` on a scalar is ``==`` without its error, lists are equal
  element by element.
* Semver values have no ``<``, no ``size()`` and no ``+``; an unknown attribute domain, even a computed one, is
  an empty map; an unknown name in a domain is the error "no such key: <name>".
* ``&&`` is false when any operand is false and ``||`` true when any is true, whatever errors the others
  raise; a non-bool operand counts as an error. Operands run left to right and stop at the deciding one; a version
  looked up in a list of constants (a Go panic in cel-go) ends the evaluation with an error if it is reached.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpudra.allocator.cel.celast import Node, flatten_calls
from gpudra.allocator.cel.celtypes import Quantity, Semver
from gpudra.allocator.cel.celview import CelDevice, qualified_key
from gpudra.errors import InvalidInputError

__all__ = ["CelEvalError", "constant_value", "translate"]

Fn = Callable[[CelDevice], Any]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
MAX_LIST_VALUES = 48  # Kubernetes' ResourceSliceMaxAttributeValuesPerDevice, the bound includes() enforces
_NUMBERS = (int, float)
_PRIMITIVES = (int, float, str, bool)
_EMPTY: Mapping[str, Any] = {}


class CelEvalError(Exception):
    """A selector failed on one device."""


class _Abort(CelEvalError):
    """An error cel-go raises as a Go panic and recovers as an "internal error": it ends the evaluation where it
    happens, so ``&&`` and ``||`` do not absorb it as they absorb the others (an operand evaluated before it can
    still decide)."""


class _Unsupported(Exception):
    """The tree uses something outside the translated part of CEL."""


def _no_overload(name: str) -> CelEvalError:
    return CelEvalError(f"no such overload: {name}")


def _missing(name: object) -> CelEvalError:
    return CelEvalError(f"no such key: {name}")


def _cel_type(value: object) -> str:
    names = {bool: "bool", int: "int", float: "double", str: "string", Semver: "kubernetes.Semver",
             Quantity: "kubernetes.Quantity", tuple: "list"}  # fmt: skip
    return names.get(type(value), "map")


# ---- value semantics ---------------------------------------------------------------------------------------


def _eq(a: Any, b: Any) -> bool:
    """cel-go's ``lhs.Equal(rhs)``."""
    ta = type(a)
    if ta is tuple and type(b) is tuple:
        return len(a) == len(b) and all(_same_element(x, y) for x, y in zip(a, b, strict=True))
    if ta is type(b):
        return bool(a == b)
    if ta is Semver or ta is Quantity:
        raise _no_overload("_==_")
    return ta in _NUMBERS and type(b) in _NUMBERS and a == b


def _same_element(a: Any, b: Any) -> bool:
    """One element of cel-go's list equality: only a false answer tells the lists apart, an error does not."""
    try:
        return _eq(a, b)
    except CelEvalError:
        return True


def _equal_or_false(a: Any, b: Any) -> bool:
    try:
        return _eq(a, b)
    except CelEvalError:
        return False


def _includes(target: Any, value: Any) -> bool:
    """Kubernetes' ``<target>.includes(<value>)`` (DRAListTypeAttributes): a list holds the value, or a scalar
    equals it. Elements are compared with ``==`` and one that cannot be compared does not match."""
    if type(target) is not tuple:
        return _equal_or_false(target, value)
    for i, item in enumerate(target):
        if i >= MAX_LIST_VALUES:
            raise CelEvalError(
                f"'includes' function cannot be applied to lists longer than {MAX_LIST_VALUES} values"
            )
        if _equal_or_false(item, value):
            return True
    return False


def _ne(a: Any, b: Any) -> bool:
    try:
        return not _eq(a, b)
    except CelEvalError:
        return True


def _relational(name: str, test: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    def compare(a: Any, b: Any) -> bool:
        ta, tb = type(a), type(b)
        if (ta is tb and ta in _PRIMITIVES) or (ta in _NUMBERS and tb in _NUMBERS):
            return test(a, b)
        raise _no_overload(name)

    return compare


def _checked(value: int) -> int:
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise CelEvalError("integer overflow")
    return value


def _ints(name: str, a: Any, b: Any) -> tuple[int, int]:
    if type(a) is int and type(b) is int:
        return a, b
    raise _no_overload(name)


def _add(a: Any, b: Any) -> Any:
    if type(a) is str and type(b) is str:
        return a + b
    if type(a) is tuple and type(b) is tuple:
        return a + b  # list-typed attributes: CEL concatenates lists
    if type(a) is float and type(b) is float:
        return a + b
    x, y = _ints("_+_", a, b)
    return _checked(x + y)


def _sub(a: Any, b: Any) -> Any:
    if type(a) is float and type(b) is float:
        return a - b
    x, y = _ints("_-_", a, b)
    return _checked(x - y)


def _mul(a: Any, b: Any) -> Any:
    if type(a) is float and type(b) is float:
        return a * b
    x, y = _ints("_*_", a, b)
    return _checked(x * y)


def _quotient(x: int, y: int) -> int:
    q = abs(x) // abs(y)
    return -q if (x < 0) != (y < 0) else q  # Go truncates toward zero


def _div(a: Any, b: Any) -> int:
    x, y = _ints("_/_", a, b)
    if y == 0:
        raise CelEvalError("division by zero")
    return _checked(_quotient(x, y))


def _mod(a: Any, b: Any) -> int:
    x, y = _ints("_%_", a, b)
    if y == 0:
        raise CelEvalError("modulus by zero")
    if x == _INT64_MIN and y == -1:
        raise CelEvalError("integer overflow")
    return x - y * _quotient(x, y)


def _neg(a: Any) -> Any:
    if type(a) is float:
        return -a
    if type(a) is not int:
        raise _no_overload("-_")
    return _checked(-a)


def _size(a: Any) -> int:
    if type(a) is str or type(a) is tuple or type(a) is dict:
        return len(a)
    raise _no_overload("size")


def _strings(name: str, a: Any, b: Any) -> tuple[str, str]:
    if type(a) is str and type(b) is str:
        return a, b
    raise _no_overload(name)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_ASCII_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _string_method(name: str) -> Callable[..., Any]:
    if name in ("startsWith", "endsWith", "contains"):
        test = {"startsWith": str.startswith, "endsWith": str.endswith, "contains": str.__contains__}[name]
        return lambda a, b: test(*_strings(name, a, b))
    table = _ASCII_LOWER if name == "lowerAscii" else _ASCII_UPPER

    def convert(a: Any) -> str:
        if type(a) is not str:
            raise _no_overload(name)
        return a.translate(table)

    return convert


def _kubernetes(call: Callable[..., Any]) -> Callable[..., Any]:
    """Kubernetes' quantity and semver functions: their InvalidInputError becomes a CEL error."""

    def run(*args: Any) -> Any:
        try:
            return call(*args)
        except InvalidInputError as error:
            raise CelEvalError(str(error)) from error

    return run


def _typed(name: str, kinds: tuple[type, ...], call: Callable[..., Any]) -> Callable[..., Any]:
    def checked(*args: Any) -> Any:
        if len(args) != len(kinds) or any(type(a) is not k for a, k in zip(args, kinds, strict=True)):
            raise _no_overload(name)
        return call(*args)

    return checked


def _ordered(name: str, test: Callable[[Any, Any], bool] | None) -> Callable[[Any, Any], Any]:
    """compareTo (``test`` None) / isGreaterThan / isLessThan on two Quantities or two Semvers."""

    def run(a: Any, b: Any) -> Any:
        ta = type(a)
        x: Any
        y: Any
        if ta is Quantity and type(b) is Quantity:
            x, y = a.ordinal, b.ordinal
        elif ta is Semver and type(b) is Semver:
            x, y = a.precedence, b.precedence
        else:
            raise _no_overload(name)
        return (x > y) - (x < y) if test is None else test(x, y)

    return run


def _quantity_and_int(name: str, call: Callable[[Quantity, Quantity | int], Quantity]) -> Callable[..., Any]:
    def run(a: Any, b: Any) -> Any:
        if type(a) is Quantity and (type(b) is Quantity or type(b) is int):
            return call(a, b)
        raise _no_overload(name)

    return run


_GLOBALS: dict[tuple[str, int], Callable[..., Any]] = {
    ("quantity", 1): _typed("quantity", (str,), _kubernetes(Quantity.parse)),
    ("isQuantity", 1): _typed("isQuantity", (str,), Quantity.is_valid),
    ("semver", 1): _typed("semver", (str,), _kubernetes(Semver.parse)),
    ("semver", 2): _typed("semver", (str, bool), _kubernetes(lambda s, n: Semver.parse(s, normalize=n))),
    ("isSemver", 1): _typed("isSemver", (str,), Semver.is_valid),
    ("isSemver", 2): _typed("isSemver", (str, bool), lambda s, n: Semver.is_valid(s, normalize=n)),
    ("size", 1): _size,
}

_METHODS: dict[tuple[str, int], Callable[..., Any]] = {
    ("size", 0): _size,
    ("startsWith", 1): _string_method("startsWith"),
    ("endsWith", 1): _string_method("endsWith"),
    ("contains", 1): _string_method("contains"),
    ("lowerAscii", 0): _string_method("lowerAscii"),
    ("upperAscii", 0): _string_method("upperAscii"),
    ("compareTo", 1): _ordered("compareTo", None),
    ("isGreaterThan", 1): _ordered("isGreaterThan", operator.gt),
    ("isLessThan", 1): _ordered("isLessThan", operator.lt),
    ("add", 1): _quantity_and_int("add", Quantity.add),
    ("sub", 1): _quantity_and_int("sub", Quantity.sub),
    ("sign", 0): _typed("sign", (Quantity,), Quantity.sign),
    ("isInteger", 0): _typed("isInteger", (Quantity,), Quantity.is_integer),
    ("asInteger", 0): _typed("asInteger", (Quantity,), _kubernetes(Quantity.as_integer)),
    ("asApproximateFloat", 0): _typed("asApproximateFloat", (Quantity,), Quantity.as_approximate_float),
    ("major", 0): _typed("major", (Semver,), lambda s: s.major),
    ("minor", 0): _typed("minor", (Semver,), lambda s: s.minor),
    ("patch", 0): _typed("patch", (Semver,), lambda s: s.patch),
    ("includes", 1): _includes,
}

_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "_==_": _eq,
    "_!=_": _ne,
    "_<_": _relational("_<_", operator.lt),
    "_<=_": _relational("_<=_", operator.le),
    "_>_": _relational("_>_", operator.gt),
    "_>=_": _relational("_>=_", operator.ge),
    "_+_": _add,
    "_-_": _sub,
    "_*_": _mul,
    "_/_": _div,
    "_%_": _mod,
}
_DIVISION = {"_/_", "_%_"}


# ---- translation -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Part:
    """A translated node. ``kind``: value, or the maps: root-attributes, root-capacity, domain (one domain's map),
    list (a list literal, ``items`` its parts)."""

    fn: Fn
    kind: str = "value"
    constant: bool = False
    value: Any = None
    items: tuple[_Part, ...] = ()
    domain: str | None = None  # a domain map read by a literal domain name
    root: str = ""  # the root of a domain map: attributes or capacity
    compared: tuple[_Part, Any] | None = None  # x.compareTo(constant): (x, constant), for _fused_compare
    path: tuple[bool, str, str] | None = None  # a literal lookup: (in attributes, not capacity; domain; name)


def _constant(value: Any) -> _Part:
    return _Part(lambda _d: value, constant=True, value=value)


_PROBE = CelDevice("", {}, {})


def _folded(fn: Fn, parts: list[_Part]) -> _Part:
    """Fold a call of constants into its value (a call that fails stays a call: it fails on every device)."""
    if parts and all(p.constant for p in parts):
        try:
            return _constant(fn(_PROBE))
        except CelEvalError:
            return _Part(fn)
    return _Part(fn)


def _value(part: _Part) -> Fn:
    """A part that evaluates to a value (a domain map is one: its size, its keys)."""
    if part.kind in ("value", "domain"):
        return part.fn
    raise _Unsupported(f"{part.kind} used as a value")


def _scalar(part: _Part) -> Fn:
    """A part that evaluates to a scalar: what comparisons, operators and functions other than size() take."""
    if part.kind == "value":
        return part.fn
    raise _Unsupported(f"{part.kind} where a scalar is expected")


class _Translator:
    def __init__(self, root: Node) -> None:
        self.allow_double_division = not _divides_with_doubles(root)

    def node(self, node: Node) -> _Part:
        if node.kind == "const":
            if node.name not in ("bool", "int", "double", "string"):
                raise _Unsupported(f"{node.name} constant")
            return _constant(node.value)
        if node.kind == "ident":
            return self._ident(node.name)
        if node.kind == "select":
            return self._select(node)
        if node.kind == "list":
            items = tuple(self.node(arg) for arg in node.args)
            fns = [_scalar(item) for item in items]
            constant = all(item.constant for item in items)
            if constant:
                values = tuple(item.value for item in items)
                return _Part(lambda _d: values, kind="list", constant=True, value=values, items=items)
            return _Part(lambda d: tuple(f(d) for f in fns), kind="list", items=items)
        if node.kind == "call":
            return self._call(node)
        raise _Unsupported(node.kind)

    def _ident(self, name: str) -> _Part:
        if name == "device.driver":
            return _Part(lambda d: d.driver)
        if name == "device.allowMultipleAllocations":
            return _Part(lambda d: d.allow_multiple_allocations)
        if name in ("device.attributes", "device.capacity"):
            return _Part(lambda d: None, kind="root", root=name.rpartition(".")[2])
        raise _Unsupported(f"identifier {name}")

    def _select(self, node: Node) -> _Part:
        assert node.target is not None
        target = self.node(node.target)
        if node.test_only:
            if target.kind != "domain":
                raise _Unsupported("has() outside a domain map")
            if target.domain is not None:
                key = qualified_key(target.domain, node.name)
                if target.root == "attributes":
                    return _Part(lambda d: key in d.values)
                return _Part(lambda d: key in d.quantities)
            get, name = target.fn, node.name
            return _Part(lambda d: name in get(d))
        return self._lookup(target, _constant(node.name))

    def _lookup(self, target: _Part, key: _Part) -> _Part:
        """``target[key]`` / ``target.key`` on the attribute and capacity maps."""
        if target.kind == "root":
            return self._domain(target.root, key)
        if target.kind != "domain":
            raise _Unsupported("index outside the device maps")
        if key.constant and type(key.value) is str:
            name = key.value
            if target.domain is not None:
                path = (target.root == "attributes", target.domain, name)
                return _Part(_attribute(target.root, target.domain, name), path=path)
            get_map = target.fn

            def lookup(d: CelDevice) -> Any:
                try:
                    return get_map(d)[name]
                except KeyError:
                    raise _missing(name) from None

            return _Part(lookup)
        get_map, get_key = target.fn, _scalar(key)

        def computed(d: CelDevice) -> Any:
            values, k = get_map(d), get_key(d)
            if type(k) is not str:
                raise _no_overload("_[_]")
            if k not in values:
                raise _missing(k)
            return values[k]

        return _Part(computed)

    def _domain(self, root: str, key: _Part) -> _Part:
        if key.constant and type(key.value) is str:
            domain: str = key.value
            if root == "attributes":
                return _Part(lambda d: d.attributes.get(domain, _EMPTY), "domain", domain=domain, root=root)
            return _Part(lambda d: d.capacity.get(domain, _EMPTY), "domain", domain=domain, root=root)
        get_key = _scalar(key)

        def computed(d: CelDevice) -> Any:
            k = get_key(d)
            if type(k) is not str:
                raise _no_overload("_[_]")
            return (d.attributes if root == "attributes" else d.capacity).get(k, _EMPTY)

        return _Part(computed, "domain", root=root)

    def _call(self, node: Node) -> _Part:
        name = node.name
        if name in ("_&&_", "_||_"):
            return _logical(name == "_&&_", [self.node(a) for a in flatten_calls(node, name)])
        if name == "_[_]" and len(node.args) == 2:
            return self._lookup(self.node(node.args[0]), self.node(node.args[1]))
        if name == "@in" and len(node.args) == 2:
            return self._in(self.node(node.args[0]), self.node(node.args[1]))
        if name in _DIVISION and not self.allow_double_division:
            raise _Unsupported("division where doubles appear")
        if node.target is not None:
            method = _METHODS.get((name, len(node.args)))
            if method is None:
                raise _Unsupported(f"method {name}")
            parts = [self.node(node.target), *(self.node(a) for a in node.args)]
            applied = _apply(method, parts, maps=name == "size")
            if name == "compareTo" and parts[1].constant and not applied.constant:
                return _Part(applied.fn, compared=(parts[0], parts[1].value))
            return applied
        parts = [self.node(a) for a in node.args]
        if name == "!_":
            return _not(parts[0])
        if name == "_?_:_":
            return _conditional(*parts)
        if name == "-_":
            return _apply(_neg, parts)
        binary = _BINARY.get(name)
        if binary is not None and len(parts) == 2:
            fused = _fused_compare(name, parts)
            return fused if fused is not None else _apply(binary, parts)
        function = _GLOBALS.get((name, len(parts)))
        if function is None:
            raise _Unsupported(f"function {name}")
        return _apply(function, parts, maps=name == "size")

    def _in(self, element: _Part, container: _Part) -> _Part:
        get = _scalar(element)
        if container.kind == "domain":
            get_map = container.fn

            def has_key(d: CelDevice) -> bool:
                k = get(d)
                return type(k) is str and k in get_map(d)

            return _Part(has_key)
        if container.kind == "value":  # a list attribute
            get_list = container.fn

            def in_list(d: CelDevice) -> bool:
                value, values = get(d), get_list(d)
                if type(values) is not tuple:
                    raise _no_overload("@in")
                return any(_equal_or_false(value, v) for v in values)

            return _Part(in_list)
        if container.kind != "list":
            raise _Unsupported("in over something other than a list, a list attribute or a domain map")
        if container.constant and not container.value:
            return _constant(False)  # cel-go folds `x in []` to false without evaluating x
        if container.constant and container.value and all(type(v) in _PRIMITIVES for v in container.value):
            members = frozenset(_set_key(v) for v in container.value)

            def member(d: CelDevice) -> bool:
                value = get(d)
                kind = type(value)
                if kind is Semver:  # cel-go hashes it into a set of the constants, and panics
                    raise _Abort("a version cannot be looked up in a list of constants")
                return kind in _PRIMITIVES and _set_key(value) in members

            return _folded(member, [element])
        items = container.fn

        def contains(d: CelDevice) -> bool:
            value = get(d)
            for candidate in items(d):
                try:
                    if _eq(value, candidate):
                        return True
                except CelEvalError:
                    continue
            return False

        return _folded(contains, [element, container])


def _set_key(value: Any) -> tuple[str, Any]:
    kind = type(value)
    return ("n" if kind is int or kind is float else "b" if kind is bool else "s", value)


def _divides_with_doubles(root: Node) -> bool:
    """A ``/`` or ``%`` whose operands can be doubles: dividing doubles is left to the library (infinities and NaN).
    A value reaches an operator only from the tree below it (selectors have no variables, and attributes and
    capacities are never doubles), so a double elsewhere in the selector does not matter."""
    return any(
        node.kind == "call" and node.name in _DIVISION and any(_yields_double(arg) for arg in node.args)
        for node in _subtree(root)
    )


def _yields_double(root: Node) -> bool:
    return any(
        (node.kind == "const" and node.name == "double") or node.name == "asApproximateFloat"
        for node in _subtree(root)
    )


def _subtree(root: Node) -> Iterator[Node]:
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children())


def _attribute(root: str, domain: str, name: str) -> Fn:
    """``device.attributes[domain].name`` (or capacity) with literal names: the hot path of every selector."""
    key = qualified_key(domain, name)
    if root == "attributes":

        def attribute(d: CelDevice) -> Any:
            try:
                return d.values[key]
            except KeyError:
                raise _missing(name) from None

        return attribute

    def capacity(d: CelDevice) -> Any:
        try:
            return d.quantities[key]
        except KeyError:
            raise _missing(name) from None

    return capacity


def _equals_text(path: tuple[bool, str, str], text: str) -> Fn:
    """``device.attributes[domain].name == "text"``: the most common test of all, in one closure."""
    attributes, domain, name = path
    key = qualified_key(domain, name)

    def equals(d: CelDevice) -> bool:
        try:
            value = (d.values if attributes else d.quantities)[key]
        except KeyError:
            raise _missing(name) from None
        return value == text if type(value) is str else _eq(value, text)

    return equals


def _apply(call: Callable[..., Any], parts: list[_Part], *, maps: bool = False) -> _Part:
    """``call`` on the values of ``parts`` (scalars; ``maps``: a domain map may be one, for size())."""
    fns = [_value(p) if maps else _scalar(p) for p in parts]
    if len(fns) == 1:
        (a,) = fns
        return _folded(lambda d: call(a(d)), parts)
    if len(fns) == 2:
        a, b = fns
        if parts[1].constant and not parts[0].constant:
            constant = parts[1].value
            if call is _eq and type(constant) is str:
                if parts[0].path is not None:
                    return _Part(_equals_text(parts[0].path, constant))
                return _Part(lambda d: v == constant if type(v := a(d)) is str else _eq(v, constant))
            return _Part(lambda d: call(a(d), constant))
        return _folded(lambda d: call(a(d), b(d)), parts)
    return _folded(lambda d: call(*(f(d) for f in fns)), parts)


_SIGN_TESTS: dict[str, Callable[[int, int], bool]] = {
    "_==_": operator.eq, "_!=_": operator.ne, "_<_": operator.lt, "_<=_": operator.le, "_>_": operator.gt,
    "_>=_": operator.ge,
}  # fmt: skip


def _fused_compare(name: str, parts: list[_Part]) -> _Part | None:
    """``x.compareTo(constant) >= 0``, the way selectors compare capacities and versions, in one closure (the
    general path when ``x`` is not of the constant's type, for its error)."""
    compared, bound = parts[0].compared, parts[1]
    test = _SIGN_TESTS.get(name)
    if compared is None or test is None or not bound.constant or type(bound.value) is not int:
        return None
    receiver, constant = compared
    kind, n, general, binary = type(constant), bound.value, parts[0].fn, _BINARY[name]
    if kind is Quantity and receiver.path is not None:
        y, (attributes, domain, field) = constant.ordinal, receiver.path
        key = qualified_key(domain, field)

        def capacity(d: CelDevice) -> bool:
            try:
                value = (d.values if attributes else d.quantities)[key]
            except KeyError:
                raise _missing(field) from None
            if type(value) is Quantity:
                x = value.ordinal
                return test((x > y) - (x < y), n)
            return bool(binary(general(d), n))

        return _Part(capacity)
    get = _scalar(receiver)
    if kind is Quantity:
        y = constant.ordinal

        def quantity(d: CelDevice) -> bool:
            value = get(d)
            if type(value) is Quantity:
                x = value.ordinal
                return test((x > y) - (x < y), n)
            return bool(binary(general(d), n))

        return _Part(quantity)
    if kind is Semver:
        key = constant.precedence

        def version(d: CelDevice) -> bool:
            value = get(d)
            if type(value) is Semver:
                x = value.precedence
                return test((x > key) - (x < key), n)
            return bool(binary(general(d), n))

        return _Part(version)
    return None


def _not(part: _Part) -> _Part:
    get = _scalar(part)

    def negate(d: CelDevice) -> bool:
        value = get(d)
        if value is True or value is False:
            return not value
        raise _no_overload("!_")

    return _folded(negate, [part])


def _conditional(condition: _Part, then: _Part, otherwise: _Part) -> _Part:
    test, yes, no = _scalar(condition), _scalar(then), _scalar(otherwise)

    def choose(d: CelDevice) -> Any:
        value = test(d)
        if value is True:
            return yes(d)
        if value is False:
            return no(d)
        raise _no_overload("_?_:_")

    return _folded(choose, [condition, then, otherwise])


def _logical(conjunction: bool, parts: list[_Part]) -> _Part:
    """n-ary ``&&`` (``||``): the deciding value (false; true) of any operand wins over errors in the others."""
    fns = [_scalar(p) for p in parts]
    decisive: bool = not conjunction
    name = "_&&_" if conjunction else "_||_"

    def full(d: CelDevice) -> bool:
        error: CelEvalError | None = None
        for fn in fns:
            try:
                value = fn(d)
            except _Abort:
                raise
            except CelEvalError as failure:
                error = error or failure
                continue
            if value is decisive:
                return not conjunction
            if value is not (not decisive):
                error = error or _no_overload(name)
        if error is not None:
            raise error
        return not decisive

    def fast(d: CelDevice) -> bool:
        try:
            for fn in fns:
                value = fn(d)
                if value is decisive:
                    return not conjunction
                if value is not (not decisive):
                    return full(d)
        except CelEvalError:
            return full(d)
        return not decisive

    if len(fns) == 2 and not any(p.constant for p in parts):
        first, second = fns

        def fast2(d: CelDevice) -> bool:
            try:
                value = first(d)
                if value is not decisive:
                    if value is not (not decisive):
                        return full(d)
                    value = second(d)
                    if value is not True and value is not False:
                        return full(d)
                return value is True
            except CelEvalError:
                return full(d)

        return _Part(fast2)
    return _folded(fast, parts)


def translate(root: Node) -> Callable[[CelDevice], Any] | None:
    """The selector as a closure returning its value (the caller checks that it is a bool) or raising
    CelEvalError; None when the tree uses anything outside the translated part of CEL."""
    try:
        return _scalar(_Translator(root).node(root))
    except _Unsupported:
        return None


def constant_value(node: Node) -> tuple[bool, Any]:
    """``(True, value)`` when ``node`` folds to a constant the way :func:`translate` folds it (``quantity("40Gi")``
    is a Quantity), else ``(False, None)``."""
    try:
        part = _Translator(node).node(node)
    except _Unsupported:
        return False, None
    return part.constant, part.value


def result_error(value: object) -> str:
    """The message for a selector that returned something else than a bool."""
    return f"selector returned {_cel_type(value)} {value!r}, not a bool"
