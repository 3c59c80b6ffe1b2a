"""CEL selectors of DeviceClasses and ResourceClaims: compile once, evaluate against devices, cache the
answers.

This is the only module that imports the CEL library (cel-expr-python, Google's cel-cpp). It builds two
environments from one table of functions:

* a checking environment that mirrors Kubernetes' DRA CEL environment: ``device.driver``,
  ``device.attributes`` (map of domain to map of name to int | bool | string | Semver), ``device.capacity``
  (map of domain to map of name to Quantity), ``device.allowMultipleAllocations``; ``kubernetes.Quantity``
  and ``kubernetes.Semver`` are abstract types, so ``quantity(...) >= quantity(...)`` is a type error here
  exactly as in Kubernetes;
* a runtime environment with the same functions over values the library can carry: a Quantity travels as a
  tagged string holding its exact fraction, a Semver as bytes of its canonical text. Both encodings compare
  equal exactly when the values do.

Selectors within the part of CEL that DRA selectors use run as Python closures (``celclosures``), with
Kubernetes' semantics, several times faster than the library; the commonest shapes first through one generated
function each (``celfastpath``), which hands the closures every device it cannot decide. The others run in the
library, their results cached per selector on the projection of the device the selector can read (see
``celanalysis``), so identical devices (same model on thousands of nodes) cost one evaluation. Unknown attribute
domains behave as empty maps, as in Kubernetes: ``has(device.attributes["x.com"].a)`` is false,
``device.attributes["x.com"].a`` is a runtime "no such key" error.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Hashable, Mapping
from fractions import Fraction
from typing import Any

import cel_expr_python.cel as _cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings

from gpudra.allocator.cel import celanalysis
from gpudra.allocator.cel.celast import Node, decode, line_column
from gpudra.allocator.cel.celclosures import MAX_LIST_VALUES, CelEvalError, result_error, translate
from gpudra.allocator.cel.celcost import COST_LIMIT, estimated_cost
from gpudra.allocator.cel.celfastpath import fast_path
from gpudra.allocator.cel.celtypes import Quantity, Semver
from gpudra.allocator.cel.celview import CelDevice, cel_device
from gpudra.errors import InvalidInputError

__all__ = [
    "COST_LIMIT",
    "ITERATION_BUDGET",
    "MAX_EXPRESSION_LENGTH",
    "CelCompileError",
    "CelCostError",
    "CelDevice",
    "CelError",
    "CelRuntimeError",
    "CompiledSelector",
    "Quantity",
    "Semver",
    "cel_device",
    "check_new_selector",
    "compile_selector",
    "estimated_selector_cost",
]

MAX_EXPRESSION_LENGTH = 10 * 1024  # Kubernetes' limit on a selector expression
_RESULT_CACHE_LIMIT = 200_000


class CelError(InvalidInputError):
    """A selector is invalid or failed on a device. ``line``/``column`` are 1-based (0 when unknown)."""

    def __init__(
        self, message: str, *, expression: str, line: int = 0, column: int = 0, hint: str = ""
    ) -> None:
        where = f"<input>:{line}:{column}: " if line else ""
        super().__init__(f"{where}{message}" + (f" (hint: {hint})" if hint else ""))
        self.expression = expression
        self.line = line
        self.column = column
        self.hint = hint


class CelCompileError(CelError):
    """Syntax error, type error, unknown function or overload, non-v1 form, expression too long."""


class CelResultTypeError(CelCompileError):
    """A selector that compiles but gives another type than bool (``result_type``: its name, ``string``)."""

    def __init__(self, result_type: str, *, expression: str) -> None:
        super().__init__(
            f"a selector must evaluate to bool, this one gives {result_type}",
            expression=expression,
            line=1,
            column=1,
            hint='compare the value, e.g. device.attributes["gpu.nvidia.com"].type == "gpu"',
        )
        self.result_type = result_type


class CelCostError(CelCompileError):
    """A new selector whose estimated worst-case cost (``cost``) exceeds kube-apiserver's limit."""

    def __init__(self, cost: int, *, expression: str) -> None:
        super().__init__(
            f"too complex: its estimated cost is {cost}, over the limit of {COST_LIMIT}",
            expression=expression,
            hint="iterate over fewer maps, or over one attribute domain instead of all of them",
        )
        self.cost = cost


class CelRuntimeError(CelError):
    """Evaluation failed on a device: no such key, overflow, a non-bool result, the evaluation budget."""


# ---- values ------------------------------------------------------------------------------------------------

_QTAG = "\x1fquantity:"  # a control character no published string carries; NUL does not survive the library


def _encode(value: object) -> object:
    if isinstance(value, tuple):  # a list attribute
        return [_encode(v) for v in value]
    if isinstance(value, Quantity):
        return f"{_QTAG}{value.value.numerator}/{value.value.denominator}"
    if isinstance(value, Semver):
        return str(Semver(value.major, value.minor, value.patch, value.prerelease)).encode()
    return value


@functools.lru_cache(maxsize=4096)
def _quantity(encoded: str) -> Quantity:
    if not isinstance(encoded, str) or not encoded.startswith(_QTAG):
        raise TypeError(f"no such overload: {encoded!r} is not a quantity")
    return Quantity(Fraction(encoded[len(_QTAG) :]))


@functools.lru_cache(maxsize=4096)
def _semver(encoded: bytes) -> Semver:
    return Semver.parse(bytes(encoded).decode())


def _q(value: Any) -> Quantity:
    return _quantity(str(value)) if isinstance(value, str) else _quantity(value)


def _s(value: Any) -> Semver:
    if not isinstance(value, bytes | bytearray):
        raise TypeError(f"no such overload: {value!r} is not a semver")
    return _semver(bytes(value))


def _qnum(value: Any) -> Quantity | int:
    return value if isinstance(value, int) and not isinstance(value, bool) else _q(value)


def _ordered(items: list[Any]) -> bool:
    return all(a <= b for a, b in itertools.pairwise(items))


def _qcmp(a: Any, b: Any) -> int:
    return _q(a).compare_to(_q(b))


def _scmp(a: Any, b: Any) -> int:
    return _s(a).compare_to(_s(b))


def _find(text: str, pattern: str) -> str:
    found = re.search(pattern, text)
    return found.group(0) if found else ""


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    return [m.group(0) for m in re.finditer(pattern, text)][: limit if limit >= 0 else None]


def _same(a: Any, b: Any) -> bool:
    """CEL equality of two runtime values that never raises: a bool is not a number."""
    return (type(a) is bool) == (type(b) is bool) and bool(a == b)


def _includes(target: Any, value: Any) -> bool:
    if isinstance(target, str | bytes | bytearray) or not hasattr(target, "__iter__"):
        return _same(target, value)
    for i, item in enumerate(target):
        if i >= MAX_LIST_VALUES:
            raise ValueError(
                f"'includes' function cannot be applied to lists longer than {MAX_LIST_VALUES} values"
            )
        if _same(item, value):
            return True
    return False


def _same_set(a: list[Any], b: list[Any]) -> bool:
    return all(x in a for x in b) and all(x in b for x in a)


# One row per overload: name, result, parameters, member?, implementation. Type letters: Q quantity, S semver,
# s string, i int, b bool, d double, D dyn, L list(dyn), Li list(int), Ld list(double), Ls list(string).
_FUNCTIONS: tuple[tuple[str, str, tuple[str, ...], bool, Callable[..., Any]], ...] = (
    ("quantity", "Q", ("s",), False, lambda s: _encode(Quantity.parse(s))),
    ("isQuantity", "b", ("s",), False, Quantity.is_valid),
    ("compareTo", "i", ("Q", "Q"), True, _qcmp),
    ("isGreaterThan", "b", ("Q", "Q"), True, lambda a, b: _qcmp(a, b) > 0),
    ("isLessThan", "b", ("Q", "Q"), True, lambda a, b: _qcmp(a, b) < 0),
    ("add", "Q", ("Q", "Q"), True, lambda a, b: _encode(_q(a).add(_q(b)))),
    ("add", "Q", ("Q", "i"), True, lambda a, b: _encode(_q(a).add(_qnum(b)))),
    ("sub", "Q", ("Q", "Q"), True, lambda a, b: _encode(_q(a).sub(_q(b)))),
    ("sub", "Q", ("Q", "i"), True, lambda a, b: _encode(_q(a).sub(_qnum(b)))),
    ("sign", "i", ("Q",), True, lambda a: _q(a).sign()),
    ("isInteger", "b", ("Q",), True, lambda a: _q(a).is_integer()),
    ("asInteger", "i", ("Q",), True, lambda a: _q(a).as_integer()),
    ("asApproximateFloat", "d", ("Q",), True, lambda a: _q(a).as_approximate_float()),
    ("semver", "S", ("s",), False, lambda s: _encode(Semver.parse(s))),
    ("semver", "S", ("s", "b"), False, lambda s, n: _encode(Semver.parse(s, normalize=n))),
    ("isSemver", "b", ("s",), False, Semver.is_valid),
    ("isSemver", "b", ("s", "b"), False, lambda s, n: Semver.is_valid(s, normalize=n)),
    ("compareTo", "i", ("S", "S"), True, _scmp),
    ("isGreaterThan", "b", ("S", "S"), True, lambda a, b: _scmp(a, b) > 0),
    ("isLessThan", "b", ("S", "S"), True, lambda a, b: _scmp(a, b) < 0),
    ("major", "i", ("S",), True, lambda a: _s(a).major),
    ("minor", "i", ("S",), True, lambda a: _s(a).minor),
    ("patch", "i", ("S",), True, lambda a: _s(a).patch),
    ("isSorted", "b", ("L",), True, lambda a: _ordered(list(a))),
    ("sum", "i", ("Li",), True, sum),
    ("sum", "d", ("Ld",), True, sum),
    ("min", "i", ("Li",), True, min),
    ("min", "d", ("Ld",), True, min),
    ("min", "s", ("Ls",), True, min),
    ("max", "i", ("Li",), True, max),
    ("max", "d", ("Ld",), True, max),
    ("max", "s", ("Ls",), True, max),
    ("sets.contains", "b", ("L", "L"), False, lambda a, b: all(x in a for x in b)),
    ("sets.equivalent", "b", ("L", "L"), False, _same_set),
    ("sets.intersects", "b", ("L", "L"), False, lambda a, b: any(x in a for x in b)),
    ("find", "s", ("s", "s"), True, _find),
    ("findAll", "Ls", ("s", "s"), True, _find_all),
    ("findAll", "Ls", ("s", "s", "i"), True, _find_all),
)


# includes() (DRAListTypeAttributes) takes any target and value: one overload to check against, and one per kind
# of target and value at runtime, where the library dispatches on the kinds of the values.
_INCLUDES_CHECK = (("includes", "b", ("D", "D"), True, _includes),)
_INCLUDES_RUNTIME = tuple(
    ("includes", "b", (target, value), True, _includes) for target in "LsibdS" for value in "LsibdS"
)


def _types(runtime: bool) -> dict[str, Any]:
    t = _cel.Type
    return {
        "Q": t.STRING if runtime else t.AbstractType("kubernetes.Quantity"),
        "S": t.BYTES if runtime else t.AbstractType("kubernetes.Semver"),
        "s": t.STRING, "i": t.INT, "b": t.BOOL, "d": t.DOUBLE, "D": t.DYN,
        "L": t.List(t.DYN), "Li": t.List(t.INT), "Ld": t.List(t.DOUBLE), "Ls": t.List(t.STRING),
    }  # fmt: skip


def _new_env(runtime: bool, includes: bool = True) -> Any:
    t, types = _cel.Type, _types(runtime)
    grouped: dict[str, list[Any]] = {}
    seen: set[tuple[str, bool, tuple[str, ...]]] = set()
    for name, result, params, member, impl in _FUNCTIONS + (
        (_INCLUDES_RUNTIME if runtime else _INCLUDES_CHECK) if includes else ()
    ):
        overload_id = "_".join((name.replace(".", "_"), *params))
        if runtime:
            kinds = tuple(types[p].name().split("<")[0] for p in params)  # the library dispatches on kinds
            if (name, member, kinds) in seen:
                continue
            seen.add((name, member, kinds))
        extra: dict[str, Any] = {"impl": impl} if runtime else {}
        overload = _cel.Overload(
            overload_id, types[result], [types[p] for p in params], is_member=member, **extra
        )
        grouped.setdefault(name, []).append(overload)
    attr_map = t.Map(t.STRING, t.Map(t.STRING, t.DYN))
    variables = {
        "device.driver": t.STRING,
        "device.attributes": attr_map,
        "device.capacity": t.Map(t.STRING, t.Map(t.STRING, types["Q"])),
        "device.allowMultipleAllocations": t.BOOL,
    }
    return _cel.NewEnv(
        variables=variables,
        functions=[_cel.FunctionDecl(name, overloads) for name, overloads in grouped.items()],
        extensions=[ext_bindings.ExtBindings(), ext_strings.ExtStrings(), ext_optional.ExtOptional()],
    )


@functools.cache
def _environments() -> tuple[Any, Any]:
    return _new_env(runtime=False), _new_env(runtime=True)


@functools.cache
def _check_env_without_includes() -> Any:
    return _new_env(runtime=False, includes=False)


# ---- devices -----------------------------------------------------------------------------------------------

_MISSING = object()


def _activation(device: CelDevice, attribute_fill: frozenset[str], capacity_fill: frozenset[str]) -> Any:
    """The library activation of a device, with empty maps for the named domains it lacks (cached on it)."""
    key = (attribute_fill, capacity_fill)
    activation = device.library.get(key)
    if activation is None:
        data = {
            "device.driver": device.driver,
            "device.attributes": _encoded_maps(device.attributes, attribute_fill),
            "device.capacity": _encoded_maps(device.capacity, capacity_fill),
            "device.allowMultipleAllocations": device.allow_multiple_allocations,
        }
        activation = device.library[key] = _environments()[1].Activation(data)
    return activation


def _encoded_maps(
    maps: Mapping[str, Mapping[str, object]], fill: frozenset[str]
) -> dict[str, dict[str, object]]:
    encoded = {domain: {name: _encode(v) for name, v in values.items()} for domain, values in maps.items()}
    for domain in fill:
        encoded.setdefault(domain, {})
    return encoded


# ---- selectors ---------------------------------------------------------------------------------------------

_LIBRARY_ERROR = re.compile(r"<input>:(\d+):(\d+): ([^\n]*)")


def _compile_error(expression: str, error: Exception) -> CelCompileError:
    text = str(error)
    found = _LIBRARY_ERROR.search(text)
    if found is None:
        return CelCompileError(text, expression=expression)
    line, column, message = int(found.group(1)), int(found.group(2)), found.group(3)
    lines = expression.split("\n")
    offset = sum(len(x) + 1 for x in lines[: line - 1]) + column - 1
    hint = celanalysis.checker_hint(expression, message, offset)
    return CelCompileError(message, expression=expression, line=line, column=column, hint=hint)


def _projector(reads: celanalysis.Reads) -> Callable[[CelDevice], Hashable]:
    """How to key cached results for this selector: the values it can read, or the whole device."""
    if reads.everything:
        return lambda device: device.shape_key
    keys: list[object] = [("driver",)] if reads.driver else []
    keys += [("multi",)] if reads.multi else []
    keys += [("a", d, n) for d, n in reads.attributes] + [("A", d) for d in reads.attribute_domains]
    keys += [("c", d, n) for d, n in reads.capacity] + [("C", d) for d in reads.capacity_domains]
    m = _MISSING
    if len(keys) == 1:
        (k1,) = keys
        return lambda device: device.keys().get(k1, m)
    if len(keys) == 2:
        k1, k2 = keys
        return lambda device: (device.keys().get(k1, m), device.keys().get(k2, m))
    if len(keys) == 3:
        k1, k2, k3 = keys
        return lambda device: (
            (keys := device.keys()).get(k1, m),
            keys.get(k2, m),
            keys.get(k3, m),
        )
    frozen = tuple(keys)
    return lambda device: tuple([device.keys().get(k, m) for k in frozen])


ITERATION_BUDGET = 10_000
"""Loop iterations the CEL library runs in one evaluation (fixed in cel-cpp). kube-scheduler has no such limit,
only the cost limit: a selector iterating more, within that cost, runs there and fails here (docs/fidelity.md)."""
_ITERATION_BUDGET = (
    f"more than {ITERATION_BUDGET} loop iterations in one evaluation: gpudra's CEL library stops there, "
    f"where Kubernetes allows any number within a cost of {COST_LIMIT}"
)

_NO_SUCH_KEY = re.compile(r'Key not found in map\s*:\s*"?([^"]*)"?')


class CompiledSelector:
    """One checked selector. ``matches`` answers for a device: with the selector's closure (``celclosures``) when
    it has one, behind a generated fast path (``celfastpath``) when the selector has a common shape, else with
    the CEL library, from a cache keyed on the values the selector can read. Runtime errors raise
    CelRuntimeError (the library's are cached like results)."""

    __slots__ = (
        "_closure",
        "_fill",
        "_program",
        "_project",
        "_results",
        "expression",
        "matches",
        "reads",
        "tree",
    )

    matches: Callable[[CelDevice], bool]
    """Whether the device passes the selector; raise CelRuntimeError. An attribute, not a method, so that a call
    is the one call of the fast path."""

    def __init__(
        self,
        expression: str,
        program: Any,
        reads: celanalysis.Reads,
        closure: Callable[[CelDevice], Any] | None = None,
        tree: Node | None = None,
    ) -> None:
        self.expression = expression
        self.reads = reads
        self.tree = tree if closure is not None else None
        """The checked syntax tree of a translated selector (``celfacts`` reads it against the device index;
        its rules are Kubernetes', which the closures follow and the library does not everywhere)."""
        self._program = program
        self._closure = closure
        self._project = _projector(reads)
        self._fill = (reads.named_attribute_domains, reads.named_capacity_domains)
        self._results: dict[Hashable, bool | str] = {}
        if closure is None:
            self.matches = self._matches_in_library
        else:
            fast = None if tree is None else fast_path(tree, self._matches_in_closures)
            self.matches = self._matches_in_closures if fast is None else fast

    def __repr__(self) -> str:
        return f"CompiledSelector({self.expression!r})"

    @property
    def translated(self) -> bool:
        """Whether the selector runs as Python closures (else the CEL library evaluates it)."""
        return self._closure is not None

    @property
    def generated(self) -> bool:
        """Whether a generated fast path (``celfastpath``) answers before the closures."""
        return self._closure is not None and self.matches != self._matches_in_closures

    def _matches_in_closures(self, device: CelDevice) -> bool:
        assert self._closure is not None
        try:
            value = self._closure(device)
        except CelEvalError as error:
            raise self._runtime_error(str(error)) from None
        if value is True or value is False:
            return value
        raise self._runtime_error(result_error(value))

    def _matches_in_library(self, device: CelDevice) -> bool:
        key = self._project(device)
        result = self._results.get(key)
        if result is None:
            result = self._evaluate(device)
            if len(self._results) >= _RESULT_CACHE_LIMIT:
                self._results.clear()
            self._results[key] = result
        if result is True or result is False:
            return result
        raise self._runtime_error(result)

    def _runtime_error(self, message: str) -> CelRuntimeError:
        hint = ""
        if message.startswith("no such key"):
            hint = 'test optional attributes with has(device.attributes["<domain>"].<name>) first'
        return CelRuntimeError(message, expression=self.expression, hint=hint)

    def evaluate_with_library(self, device: CelDevice) -> bool:
        """Evaluate with the CEL library, without the result cache (the reference for tests and benchmarks)."""
        result = self._evaluate(device)
        if isinstance(result, str):
            raise CelRuntimeError(result, expression=self.expression)
        return result

    def _evaluate(self, device: CelDevice) -> bool | str:
        attribute_fill = self._fill[0].difference(device.attributes)
        capacity_fill = self._fill[1].difference(device.capacity)
        try:
            value = self._program.eval(_activation(device, attribute_fill, capacity_fill))
        except RuntimeError as error:  # the library raises, rather than returns, a few errors
            return _ITERATION_BUDGET if "Iteration budget exceeded" in str(error) else str(error)
        result = value.value()
        if result is True or result is False:
            return bool(result)
        if value.type() == _cel.Type.ERROR:
            message = str(result)
            missing = _NO_SUCH_KEY.search(message)
            return f"no such key: {missing.group(1)}" if missing else message
        return f"selector returned {value.type().name().lower()} {result!r}, not a bool"


@functools.lru_cache(maxsize=2048)
def compile_selector(expression: str) -> CompiledSelector:
    """Check ``expression`` against Kubernetes' DRA CEL environment and prepare it for evaluation.

    Cached by text: the same expression gives the same object. Raise CelCompileError with line, column and a
    hint.
    """
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise CelCompileError(
            f"expression is {len(expression)} characters long; at most {MAX_EXPRESSION_LENGTH} are allowed",
            expression=expression[:200],
            hint="move shared conditions into the DeviceClass selectors",
        )
    check_env, runtime_env = _environments()
    try:
        parsed = check_env.compile(expression, disable_check=True)
    except RuntimeError as error:
        raise _compile_error(expression, error) from error
    ast = decode(parsed.serialize())
    finding = celanalysis.lint(ast)
    if finding is not None:
        line, column = line_column(expression, finding.offset)
        raise CelCompileError(
            finding.message, expression=expression, line=line, column=column, hint=finding.hint
        )
    try:
        checked = check_env.compile(expression)
    except RuntimeError as error:
        raise _compile_error(expression, error) from error
    result_type = checked.return_type()
    if not (result_type == _cel.Type.BOOL or result_type == _cel.Type.DYN):
        raise CelResultTypeError(result_type.name().lower(), expression=expression)
    serialized = checked.serialize()
    try:
        program = runtime_env.deserialize(serialized)
    except RuntimeError as error:  # a library limitation, not the user's fault; still reported on the object
        raise CelCompileError(f"cannot prepare the selector: {error}", expression=expression) from error
    tree = decode(serialized).root
    return CompiledSelector(expression, program, celanalysis.reads_of(ast), translate(tree), tree)


@functools.lru_cache(maxsize=2048)
def estimated_selector_cost(expression: str) -> int:
    """The worst-case cost kube-apiserver estimates for a selector (``celcost``); only a new selector is held to
    ``COST_LIMIT``, so the allocator never asks. Raise CelCompileError as ``compile_selector`` does."""
    compile_selector(expression)
    checked = _environments()[0].compile(expression)
    return estimated_cost(decode(checked.serialize(), with_types=True))


def check_new_selector(expression: str, *, list_attributes: bool) -> None:
    """Check a selector as kube-apiserver checks one a write adds or changes (its "new expressions" environment):
    as ``compile_selector`` does, and with DRAListTypeAttributes off (``list_attributes`` false) without
    ``includes()``, which that environment then lacks; then its estimated cost against the limit. Raise
    CelCompileError (CelCostError for the cost).

    Expressions already stored, and the allocator, always have ``includes()`` (kube-apiserver's "stored
    expressions" environment), so an object written while the gate was on keeps working after it is turned off.
    """
    cost = estimated_selector_cost(expression)
    if not list_attributes:
        try:
            _check_env_without_includes().compile(expression)
        except RuntimeError as error:
            raise _compile_error(expression, error) from error
    if cost > COST_LIMIT:
        raise CelCostError(cost, expression=expression)
