"""A reader for CEL's serialized abstract syntax tree (cel.expr.ParsedExpr / CheckedExpr, protobuf wire
format).

The CEL library hands back a parsed expression only as protobuf bytes and ships no Python classes for them,
so this module decodes the few messages it needs (Expr and its kinds, SourceInfo positions) with a small
wire-format reader into frozen dataclasses. The analysis in ``celanalysis`` walks these nodes to learn which
device attributes a selector reads and to spot non-v1 forms users copy from articles. Field numbers follow
cel/expr/syntax.proto and checked.proto.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from gpudra.errors import InvalidInputError

Scalar = None | bool | int | float | str | bytes


@dataclass(frozen=True, slots=True)
class Node:
    """One expression node. ``kind`` is const | ident | select | call | list | struct | comprehension."""

    id: int
    kind: str
    value: Scalar = None  # const
    name: str = ""  # ident name, select field, call function; const: null|bool|int|uint|double|string|bytes
    test_only: bool = False  # select: has()
    target: Node | None = None  # select operand, call receiver
    args: tuple[Node, ...] = ()  # call args, list elements, struct values (keys in keys)
    keys: tuple[Node | str, ...] = ()  # struct: map key nodes or field names
    # comprehension: iter_var, iter_range, accu_var, accu_init, loop_condition, loop_step, result
    comp: tuple[str, ...] = ()
    parts: tuple[Node, ...] = ()

    def children(self) -> Iterator[Node]:
        if self.target is not None:
            yield self.target
        yield from self.args
        for key in self.keys:
            if isinstance(key, Node):
                yield key
        yield from self.parts


@dataclass(frozen=True, slots=True)
class CelType:
    """A checked type: ``kind`` is dyn | null | bool | int | uint | double | string | bytes | list | map |
    type_param | message | abstract | well_known | other; ``name`` names a message, abstract or type parameter
    type; ``params``: a list's element, a map's key and value, an abstract type's parameters."""

    kind: str
    name: str = ""
    params: tuple[CelType, ...] = ()


DYN = CelType("dyn")


@dataclass(frozen=True, slots=True)
class Ast:
    root: Node
    positions: dict[int, int] = field(default_factory=dict)  # node id -> code point offset in the source
    types: dict[int, CelType] = field(default_factory=dict)  # checked: node id -> its type
    overloads: dict[int, tuple[str, ...]] = field(default_factory=dict)  # checked: call id -> overload ids


def _fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """Yield (field number, wire type, value) for each field of one message."""
    pos, end = 0, len(data)
    while pos < end:
        tag, pos = _varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield number, wire, value
        elif wire == 2:
            length, pos = _varint(data, pos)
            yield number, wire, data[pos : pos + length]
            pos += length
        elif wire == 1:
            yield number, wire, data[pos : pos + 8]
            pos += 8
        elif wire == 5:
            yield number, wire, data[pos : pos + 4]
            pos += 4
        else:
            raise InvalidInputError(f"unsupported protobuf wire type {wire} in a CEL syntax tree")


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _text(value: int | bytes) -> str:
    assert isinstance(value, bytes)
    return value.decode("utf-8")


def _msg(value: int | bytes) -> bytes:
    assert isinstance(value, bytes)
    return value


_CONSTANT_KINDS = {1: "null", 2: "bool", 3: "int", 4: "uint", 5: "double", 6: "string", 7: "bytes"}


def _constant(data: bytes) -> tuple[str, Scalar]:
    """(kind, value) of a cel.expr.Constant; a uint keeps its kind, since its value is a plain int here."""
    for number, _, value in _fields(data):
        kind = _CONSTANT_KINDS.get(number)
        if kind is None:
            continue
        if number == 2:
            return kind, bool(value)
        if number == 3:
            assert isinstance(value, int)
            return kind, _signed(value)
        if number == 4:
            assert isinstance(value, int)
            return kind, value
        if number == 5:
            return kind, float(struct.unpack("<d", _msg(value))[0])
        if number == 6:
            return kind, _text(value)
        if number == 7:
            return kind, _msg(value)
        return kind, None
    return "null", None


def decode_expr(data: bytes) -> Node:
    """Decode one cel.expr.Expr message."""
    node_id = 0
    for number, _, value in _fields(data):
        if number == 2:
            assert isinstance(value, int)
            node_id = _signed(value)
        elif number == 3:
            kind, scalar = _constant(_msg(value))
            return Node(node_id, "const", value=scalar, name=kind)
        elif number == 4:
            name = next((_text(v) for n, _, v in _fields(_msg(value)) if n == 1), "")
            return Node(node_id, "ident", name=name)
        elif number == 5:
            return _select(node_id, _msg(value))
        elif number == 6:
            return _call(node_id, _msg(value))
        elif number == 7:
            elems = tuple(decode_expr(_msg(v)) for n, _, v in _fields(_msg(value)) if n == 1)
            return Node(node_id, "list", args=elems)
        elif number == 8:
            return _struct(node_id, _msg(value))
        elif number == 9:
            return _comprehension(node_id, _msg(value))
    return Node(node_id, "const", value=None)


def _select(node_id: int, data: bytes) -> Node:
    operand: Node | None = None
    name, test_only = "", False
    for number, _, value in _fields(data):
        if number == 1:
            operand = decode_expr(_msg(value))
        elif number == 2:
            name = _text(value)
        elif number == 3:
            test_only = bool(value)
    return Node(node_id, "select", name=name, target=operand, test_only=test_only)


def _call(node_id: int, data: bytes) -> Node:
    target: Node | None = None
    name = ""
    args: list[Node] = []
    for number, _, value in _fields(data):
        if number == 1:
            target = decode_expr(_msg(value))
        elif number == 2:
            name = _text(value)
        elif number == 3:
            args.append(decode_expr(_msg(value)))
    return Node(node_id, "call", name=name, target=target, args=tuple(args))


def _struct(node_id: int, data: bytes) -> Node:
    keys: list[Node | str] = []
    values: list[Node] = []
    name = ""
    for number, _, value in _fields(data):
        if number == 1:
            name = _text(value)
        elif number == 2:
            key: Node | str = ""
            entry_value: Node | None = None
            for n, _, v in _fields(_msg(value)):
                if n == 2:
                    key = _text(v)
                elif n == 3:
                    key = decode_expr(_msg(v))
                elif n == 4:
                    entry_value = decode_expr(_msg(v))
            keys.append(key)
            values.append(entry_value if entry_value is not None else Node(0, "const"))
    return Node(node_id, "struct", name=name, keys=tuple(keys), args=tuple(values))


def _comprehension(node_id: int, data: bytes) -> Node:
    names = {1: "", 3: "", 8: ""}
    parts: dict[int, Node] = {}
    for number, _, value in _fields(data):
        if number in names:
            names[number] = _text(value)
        elif number in (2, 4, 5, 6, 7):
            parts[number] = decode_expr(_msg(value))
    blank = Node(0, "const")
    ordered = tuple(parts.get(n, blank) for n in (2, 4, 5, 6, 7))
    return Node(node_id, "comprehension", comp=(names[1], names[3], names[8]), parts=ordered)


def _positions(data: bytes) -> dict[int, int]:
    positions: dict[int, int] = {}
    for number, _, value in _fields(data):
        if number == 4:
            key = offset = 0
            for n, _, v in _fields(_msg(value)):
                assert isinstance(v, int)
                if n == 1:
                    key = _signed(v)
                elif n == 2:
                    offset = _signed(v)
            positions[key] = offset
    return positions


_PRIMITIVES = {1: "bool", 2: "int", 3: "uint", 4: "double", 5: "string", 6: "bytes"}


def _type(data: bytes) -> CelType:
    """Decode one cel.expr.Type message."""
    for number, _, value in _fields(data):
        if number == 1:
            return DYN
        if number == 2:
            return CelType("null")
        if number == 3:
            assert isinstance(value, int)
            return CelType(_PRIMITIVES.get(value, "other"))
        if number == 5:
            known = value if isinstance(value, int) else 0
            return CelType("well_known", {2: "timestamp", 3: "duration"}.get(known, "any"))
        if number == 6:
            elem = next((_type(_msg(v)) for n, _, v in _fields(_msg(value)) if n == 1), DYN)
            return CelType("list", params=(elem,))
        if number == 7:
            parts = {n: _type(_msg(v)) for n, _, v in _fields(_msg(value))}
            return CelType("map", params=(parts.get(1, DYN), parts.get(2, DYN)))
        if number == 9:
            return CelType("message", _text(value))
        if number == 10:
            return CelType("type_param", _text(value))
        if number == 14:
            name = next((_text(v) for n, _, v in _fields(_msg(value)) if n == 1), "")
            params = tuple(_type(_msg(v)) for n, _, v in _fields(_msg(value)) if n == 2)
            return CelType("abstract", name, params)
    return CelType("other")


def _entry(data: bytes) -> tuple[int, bytes]:
    key, payload = 0, b""
    for number, _, value in _fields(data):
        if number == 1:
            assert isinstance(value, int)
            key = _signed(value)
        elif number == 2:
            payload = _msg(value)
    return key, payload


def decode(serialized: bytes, *, with_types: bool = False) -> Ast:
    """Decode the library's serialized expression: an Any holding a ParsedExpr or a CheckedExpr; ``with_types``:
    a checked one's types and overloads too (``Ast.types``, ``Ast.overloads``)."""
    type_url, payload = "", b""
    for number, _, value in _fields(serialized):
        if number == 1:
            type_url = _text(value)
        elif number == 2:
            payload = _msg(value)
    expr_field, info_field = (4, 5) if type_url.endswith("CheckedExpr") else (2, 3)
    root, positions = Node(0, "const"), {}
    types: dict[int, CelType] = {}
    overloads: dict[int, tuple[str, ...]] = {}
    checked = with_types and expr_field == 4
    for number, _, value in _fields(payload):
        if number == expr_field:
            root = decode_expr(_msg(value))
        elif number == info_field:
            positions = _positions(_msg(value))
        elif checked and number == 2:  # reference_map: the overloads a call resolved to
            key, reference = _entry(_msg(value))
            ids = tuple(_text(v) for n, _, v in _fields(reference) if n == 3)
            if ids:
                overloads[key] = ids
        elif checked and number == 3:  # type_map
            key, data = _entry(_msg(value))
            types[key] = _type(data)
    return Ast(root, positions, types, overloads)


def line_column(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of a code point offset in ``text``."""
    offset = max(0, min(offset, len(text)))
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def walk(node: Node) -> Iterator[tuple[Node, Node | None]]:
    """Yield (node, parent) pairs, depth first."""
    stack: list[tuple[Node, Node | None]] = [(node, None)]
    while stack:
        current, parent = stack.pop()
        yield current, parent
        stack.extend((child, current) for child in current.children())


def qualified_name(node: Node) -> str | None:
    """``device.attributes`` for Ident(device).attributes or Ident("device.attributes"); None otherwise."""
    if node.kind == "ident":
        return node.name
    if node.kind == "select" and not node.test_only and node.target is not None:
        base = qualified_name(node.target)
        return None if base is None else f"{base}.{node.name}"
    return None


def flatten_calls(node: Node, name: str) -> list[Node]:
    """The operands of a chain of one global call (``a && b && c`` parses as nested ``_&&_`` calls), in order."""
    out: list[Node] = []
    for arg in node.args:
        if arg.kind == "call" and arg.name == name and arg.target is None:
            out += flatten_calls(arg, name)
        else:
            out.append(arg)
    return out
