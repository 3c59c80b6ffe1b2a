"""What a selector can answer on a group of devices (``index.Group``), read from the group's schema and value
counts without evaluating a device.

:func:`outcomes` gives the set of answers the selector can give on the group's devices, as bits: TRUE, FALSE,
ERROR (a runtime error). It is sound, never exact: a bit may be set that no device produces, but a missing bit
is a promise. ``outcomes == FALSE`` means every device of the group fails the selector without an error, which is
what lets the allocator answer "no device anywhere matches" from the index; no ERROR bit means no device of the
group can fail at runtime, which is what lets it skip a node without walking its devices as Kubernetes would.

The rules follow Kubernetes' CEL as ``celclosures`` implements it (so they are used only for translated
selectors): ``&&`` is false as soon as one operand is false whatever the others raise, ``||`` dually; a lookup
of an attribute the schema lacks is an error; ``attr == constant`` and ``attr in [constants]`` are decided by the
counts when the kinds agree; a Semver on the left of ``==`` with another type, or in a list of constants, is an
error; ``has()`` and ``"name" in domain`` are decided by the schema. Anything else can give true or false, and an
error unless it is a comparison, string test, quantity or version comparison of a present attribute of the
right kind with a constant.
"""

from __future__ import annotations

from typing import Any

from gpudra.allocator.cel.celast import Node
from gpudra.allocator.cel.celtypes import Quantity, Semver
from gpudra.allocator.index import Group
from gpudra.errors import InvalidInputError

TRUE, FALSE, ERROR = 1, 2, 4
ANY = TRUE | FALSE | ERROR

_ROOTS = {"device.attributes": True, "device.capacity": False}
_RELATIONAL = {"_<_", "_<=_", "_>_", "_>=_"}
_STRING_TESTS = {"startsWith", "endsWith", "contains"}
_ORDERED = {"compareTo", "isGreaterThan", "isLessThan"}
_VERSION_PARTS = {"major", "minor", "patch"}


def _const(node: Node) -> tuple[bool, Any]:
    """(True, value) for a constant the checker keeps as one: bool, int, string, double."""
    if node.kind == "const" and node.name in ("bool", "int", "string", "double"):
        return True, node.value
    return False, None


def _literal_call(node: Node) -> Any:
    """The value of ``quantity("...")`` / ``semver("...")`` with a literal argument, else None."""
    if node.kind == "call" and node.target is None and node.name in ("quantity", "semver") and node.args:
        is_const, text = _const(node.args[0])
        if is_const and isinstance(text, str) and len(node.args) == 1:
            try:
                return Quantity.parse(text) if node.name == "quantity" else Semver.parse(text)
            except InvalidInputError:
                return None
    return None


def _domain(node: Node) -> tuple[bool, str] | None:
    """(attributes?, domain) for ``device.attributes["d"]`` / ``device.attributes.d`` (or capacity)."""
    if node.kind == "call" and node.name == "_[_]" and len(node.args) == 2:
        root, key = node.args
        is_const, domain = _const(key)
        if root.kind == "ident" and root.name in _ROOTS and is_const and isinstance(domain, str):
            return _ROOTS[root.name], domain
    if node.kind == "select" and not node.test_only and node.target is not None:
        root = node.target
        if root.kind == "ident" and root.name in _ROOTS:
            return _ROOTS[root.name], node.name
    return None


def path(node: Node) -> tuple[bool, str] | None:
    """(attributes?, "domain/name") for a lookup with literal domain and name, else None."""
    if node.kind == "select" and not node.test_only and node.target is not None:
        found = _domain(node.target)
        return None if found is None else (found[0], f"{found[1]}/{node.name}")
    if node.kind == "call" and node.name == "_[_]" and len(node.args) == 2:
        found = _domain(node.args[0])
        is_const, name = _const(node.args[1])
        if found is not None and is_const and isinstance(name, str):
            return found[0], f"{found[1]}/{name}"
    return None


def _kind(group: Group, node: Node) -> type | None:
    """The type of ``node``'s value on every device of the group when it is a present attribute or capacity,
    ``device.driver`` or ``device.allowMultipleAllocations``; None otherwise (unknown or missing)."""
    if node.kind == "ident" and node.name == "device.driver":
        return str
    if node.kind == "ident" and node.name == "device.allowMultipleAllocations":
        return bool
    found = path(node)
    if found is None:
        return None
    attributes, name = found
    if attributes:
        return group.kinds.get(name)
    return Quantity if name in group.capacities else None


def _value_kind(group: Group, node: Node) -> type | None:
    """The type of ``node``'s value when it cannot fail on any device of the group, else None."""
    kind = _kind(group, node)
    if kind is not None:
        return kind
    is_const, value = _const(node)
    if is_const:
        return type(value)
    if node.kind != "call":
        return None
    args, target = node.args, node.target
    if node.name in _RELATIONAL and len(args) == 2:
        left, right = (_value_kind(group, a) for a in args)
        numbers = (int, float)
        same = left is right and left in (int, float, str, bool)
        return bool if same or (left in numbers and right in numbers) else None
    if target is None or len(args) > 1:
        return None
    receiver = _value_kind(group, target)
    if node.name in _STRING_TESTS and args:
        argument = _const(args[0])
        return bool if receiver is str and argument[0] and isinstance(argument[1], str) else None
    if node.name in _ORDERED and args:
        literal = _literal_call(args[0])
        if literal is None or receiver is not type(literal):
            return None
        return int if node.name == "compareTo" else bool
    if node.name in _VERSION_PARTS and not args:
        return int if receiver is Semver else None
    if node.name == "size" and not args:
        return int if receiver is str else None
    return None


def _missing(group: Group, node: Node) -> bool:
    """Whether ``node`` is a lookup the group's schema lacks (a runtime error on every device)."""
    found = path(node)
    if found is None:
        return False
    attributes, name = found
    return name not in (group.kinds if attributes else group.capacities)


def outcomes(node: Node, group: Group) -> int:
    """The answers ``node`` (a bool-valued selector tree) can give on the group's devices."""
    if node.kind == "const":
        return TRUE if node.value is True else FALSE if node.value is False else ERROR
    if node.kind == "select" and node.test_only and node.target is not None:
        found = _domain(node.target)
        if found is None:
            return ANY
        attributes, domain = found
        name = f"{domain}/{node.name}"
        return TRUE if name in (group.kinds if attributes else group.capacities) else FALSE
    name, args = node.name, node.args
    if node.kind == "call" and name in ("_&&_", "_||_"):
        return _logical(name == "_&&_", [outcomes(a, group) for a in args])
    if node.kind == "call" and name == "!_" and len(args) == 1:
        return _swap(outcomes(args[0], group))
    if node.kind == "call" and name == "_?_:_" and len(args) == 3:
        condition = outcomes(args[0], group)
        out = condition & ERROR
        if condition & TRUE:
            out |= outcomes(args[1], group)
        if condition & FALSE:
            out |= outcomes(args[2], group)
        return out
    if node.kind == "call" and name in ("_==_", "_!=_") and len(args) == 2:
        return _equality(group, args[0], args[1], negate=name == "_!=_")
    if node.kind == "call" and name == "@in" and len(args) == 2:
        return _membership(group, args[0], args[1])
    return TRUE | FALSE if _value_kind(group, node) is bool else ANY


def _swap(answers: int) -> int:
    return (answers & ERROR) | (FALSE if answers & TRUE else 0) | (TRUE if answers & FALSE else 0)


def _logical(conjunction: bool, parts: list[int]) -> int:
    decisive, other = (FALSE, TRUE) if conjunction else (TRUE, FALSE)
    if any(p == decisive for p in parts):
        return decisive
    out = 0
    if all(p & other for p in parts):
        out |= other
    if any(p & decisive for p in parts):
        out |= decisive
    if any(p & ERROR for p in parts):
        out |= ERROR
    return out


def _constant_value(node: Node) -> tuple[bool, Any]:
    is_const, value = _const(node)
    if is_const:
        return True, value
    literal = _literal_call(node)
    return literal is not None, literal


def _equality(group: Group, left: Node, right: Node, *, negate: bool) -> int:
    """The answers of ``left == right`` (``!=`` with ``negate``: true whenever == is not true, and an error only
    when an operand fails)."""
    for a, b, flipped in ((left, right, False), (right, left, True)):
        is_const, constant = _constant_value(b)
        if not is_const or isinstance(constant, float):
            continue
        if _missing(group, a):
            return ERROR
        kind = _kind(group, a)
        if kind is None:
            continue
        if kind is not type(constant):
            if (kind is Semver or kind is Quantity) and not flipped:
                return TRUE if negate else ERROR  # the value on the left decides: Semver.Equal fails
            return TRUE if negate else FALSE
        if kind is Quantity:
            return TRUE | FALSE
        got = _counted(group, a, {constant})
        return _swap(got) if negate else got
    return ANY


def _counted(group: Group, node: Node, wanted: set[Any]) -> int:
    """TRUE when some device's value of ``node`` is in ``wanted``, FALSE when some device's is not."""
    if node.kind == "ident":
        value = group.driver if node.name == "device.driver" else group.multi
        return TRUE if value in wanted else FALSE
    found = path(node)
    assert found is not None
    counts = group.values.get(found[1], {})
    hits = sum(counts.get(v, 0) for v in wanted)
    return (TRUE if hits else 0) | (FALSE if hits < group.count else 0)


def _membership(group: Group, element: Node, container: Node) -> int:
    """The answers of ``element in container`` for a list of constants or a domain map."""
    if container.kind == "list":
        items = [_const(a) for a in container.args]
        if not items:
            return FALSE  # folded by cel-go without evaluating the element
        if not all(is_const for is_const, _ in items):
            return ANY
        constants = [v for _, v in items]
        if _missing(group, element):
            return ERROR
        kind = _kind(group, element)
        if kind is None or any(isinstance(v, float) for v in constants):
            return ANY
        if kind is Semver:
            return ERROR  # cel-go looks the value up in a hashed set, which a Semver cannot be
        if kind is Quantity:
            return FALSE
        return _counted(group, element, {v for v in constants if type(v) is kind})
    found = _domain(container)
    is_const, name = _const(element)
    if found is not None and is_const:
        if not isinstance(name, str):
            return FALSE
        attributes, domain = found
        key = f"{domain}/{name}"
        return TRUE if key in (group.kinds if attributes else group.capacities) else FALSE
    return ANY


def nothing_passes(trees: list[Node], group: Group) -> bool:
    """Whether a request with these selectors (class selectors first) takes no device of the group and fails on
    none: some selector is false on every device, and none before it can fail."""
    for tree in trees:
        answers = outcomes(tree, group)
        if answers == FALSE:
            return True
        if answers & ERROR:
            return False
    return False


def never_fails(trees: list[Node], group: Group) -> bool:
    """Whether these selectors, evaluated in order as Kubernetes does, cannot fail on any device of the group."""
    for tree in trees:
        answers = outcomes(tree, group)
        if answers & ERROR:
            return False
        if answers == FALSE:
            return True
    return True
