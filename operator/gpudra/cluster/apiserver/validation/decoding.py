"""Decoding a request body into a built-in kind as kube-apiserver's JSON decoder does it.

What a Go struct cannot hold fails the request: the first value of the wrong JSON type
(``json: cannot unmarshal string into Go struct field ExactDeviceRequest.spec.devices.requests.exactly.count of
type int64``), a malformed quantity or time. Fields the struct does not have are listed with the paths Kubernetes
prints (``spec.devices[0].attributes.productName.strin``): an error under ``fieldValidation=Strict``, a warning
under ``Warn``, nothing under ``Ignore``; in every mode they are dropped, as the struct drops them. ``null``
values are dropped too (they decode to Go's zero value, which is not written back).

Each Go type is compiled once into a function; a value's path is a chain of small tuples, turned into text only
when something is wrong, so decoding a ResourceSlice of 128 devices stays cheap.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpudra.api.timestamps import parse_rfc3339

from .gotypes import GoType

_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_QUANTITY_SUFFIXES = frozenset(
    ("", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
)
_QUANTITY_FORMAT = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
_INT_RANGES = {"int64": (-(2**63), 2**63 - 1), "int32": (-(2**31), 2**31 - 1)}

# A path is None (the object) or (parent, tag, name, struct): tag "f" a struct field (``struct`` holds it),
# "i" a list index, "k" a map key.
Path = tuple[Any, str, Any, str] | None
Decoder = Callable[[Any, Path, "Walk"], Any]


class DecodeError(Exception):
    """A body that does not decode; ``message`` is what follows ``cannot be handled as a <Kind>:``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass
class Decoded:
    value: Any
    unknown: list[str] = field(default_factory=list)
    type_error: str = ""


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def quantity_error(value: Any) -> str:
    """Why ``value`` is not a Quantity as Kubernetes parses it ('' when it is one)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return _QUANTITY_FORMAT
    found = _QUANTITY.match(str(value).strip())
    if found is None:
        return _QUANTITY_FORMAT
    suffix = found.group(2)
    if suffix in _QUANTITY_SUFFIXES or re.fullmatch(r"[eE][-+]?[0-9]+", suffix):
        return ""
    return "unable to parse quantity's suffix"


def _time_error(value: Any) -> str:
    if not isinstance(value, str):
        return f"json: cannot unmarshal {_json_kind(value)} into Go value of type string"
    try:
        parse_rfc3339(value)
    except ValueError:
        return f'parsing time "{value}" as "2006-01-02T15:04:05Z07:00": cannot parse "{value}" as "2006"'
    return ""


def render(path: Path) -> str:
    """The path as Kubernetes prints unknown fields: ``spec.devices[0].attributes.productName.strin``."""
    parts: list[str] = []
    while path is not None:
        parent, tag, name, _ = path
        parts.append(f"[{name}]" if tag == "i" else f".{name}")
        path = parent
    return "".join(reversed(parts)).lstrip(".")


def _go_field(path: Path) -> tuple[str, str]:
    """(struct, field path) as Go's decoder names a field: struct field names only, no indexes or map keys."""
    names: list[str] = []
    struct = ""
    while path is not None:
        parent, tag, name, owner = path
        if tag == "f":
            names.append(name)
            struct = struct or owner
        path = parent
    return struct, ".".join(reversed(names))


class Walk:
    def __init__(self) -> None:
        self.unknown: list[str] = []
        self.type_error = ""

    def mismatch(self, value: Any, path: Path, go_type: str) -> None:
        if self.type_error:
            return
        what = _json_kind(value)
        if what == "number" and go_type in _INT_RANGES:
            what = f"number {value!r}"
        struct, go_path = _go_field(path)
        where = f"Go struct field {struct}.{go_path}" if struct else "Go value"
        self.type_error = f"json: cannot unmarshal {what} into {where} of type {go_type}"


def _scalar(kind: str, go: str) -> Decoder:
    if kind == "string":

        def decode_string(value: Any, path: Path, walk: Walk) -> Any:
            if type(value) is not str:
                walk.mismatch(value, path, go)
            return value

        return decode_string
    if kind == "bool":

        def decode_bool(value: Any, path: Path, walk: Walk) -> Any:
            if type(value) is not bool:
                walk.mismatch(value, path, go)
            return value

        return decode_bool
    if kind in _INT_RANGES:
        low, high = _INT_RANGES[kind]

        def decode_int(value: Any, path: Path, walk: Walk) -> Any:
            if type(value) is not int or not low <= value <= high:
                walk.mismatch(value, path, go)
            return value

        return decode_int
    if kind == "float64":

        def decode_float(value: Any, path: Path, walk: Walk) -> Any:
            if type(value) not in (int, float):
                walk.mismatch(value, path, go)
            return value

        return decode_float
    return _special(kind)


def _special(kind: str) -> Decoder:
    def decode_special(value: Any, path: Path, walk: Walk) -> Any:
        if kind == "quantity":
            why = quantity_error(value)
        elif kind == "time":
            why = _time_error(value)
        elif kind == "intorstring" and type(value) not in (str, int):
            why = f"json: cannot unmarshal {_json_kind(value)} into Go value of type int32"
        else:
            why = ""
        if why:
            raise DecodeError(why)
        return value

    return decode_special


class Compiler:
    """Decoders of Go types, compiled once per type."""

    def __init__(self) -> None:
        self._done: dict[int, tuple[GoType, Decoder]] = {}
        """By the type's identity; each entry holds its type, so no other type can take that id once it is freed."""

    def decoder(self, t: GoType) -> Decoder:
        found = self._done.get(id(t))
        if found is not None:
            return found[1]
        if t.kind == "struct":
            return self._struct(t)  # registers itself first: structs may be recursive
        decoder = self._build(t)
        self._done[id(t)] = (t, decoder)
        return decoder

    def _build(self, t: GoType) -> Decoder:
        if t.kind == "array":
            assert t.elem is not None
            return self._array(self.decoder(t.elem), t.go)
        if t.kind == "map":
            assert t.elem is not None
            return self._map(self.decoder(t.elem), t.go)
        if t.kind == "any":
            return lambda value, path, walk: value
        return _scalar(t.kind, t.go)

    def _struct(self, t: GoType) -> Decoder:
        fields: dict[str, Decoder] = {}
        struct, go = t.struct, t.go

        def decode_struct(value: Any, path: Path, walk: Walk) -> Any:
            if type(value) is not dict:
                walk.mismatch(value, path, go)
                return None
            out = {}
            for name, item in value.items():
                decode = fields.get(name)
                if decode is None:
                    walk.unknown.append(render((path, "f", name, struct)))
                elif item is not None:
                    decoded = decode(item, (path, "f", name, struct), walk)
                    if decoded is not None:
                        out[name] = decoded
            return out

        self._done[id(t)] = (t, decode_struct)
        for name, sub in t.fields.items():
            fields[name] = self.decoder(sub)
        return decode_struct

    @staticmethod
    def _array(item: Decoder, go: str) -> Decoder:
        def decode_array(value: Any, path: Path, walk: Walk) -> Any:
            if type(value) is not list:
                walk.mismatch(value, path, go)
                return None
            return [item(v, (path, "i", i, ""), walk) for i, v in enumerate(value)]

        return decode_array

    @staticmethod
    def _map(item: Decoder, go: str) -> Decoder:
        def decode_map(value: Any, path: Path, walk: Walk) -> Any:
            if type(value) is not dict:
                walk.mismatch(value, path, go)
                return None
            return {k: item(v, (path, "k", k, ""), walk) for k, v in value.items() if v is not None}

        return decode_map


_COMPILER = Compiler()


def decode(body: Any, kind: GoType) -> Decoded:
    """Decode ``body`` (a JSON value: an object for a kind) as ``kind``: the pruned object, the unknown fields, the
    first type error."""
    walk = Walk()
    value = _COMPILER.decoder(kind)(body, None, walk)
    return Decoded(value, walk.unknown, walk.type_error)


def strict_message(found: Sequence[str]) -> str:
    """Go's strict decoding error: each unknown field (``unknown field "x"``) or duplicate key, in order."""
    return "strict decoding error: " + ", ".join(found)


def document_order(body: Any) -> dict[str, int]:
    """Every field path of ``body`` (``spec.devices.requests[0].name``) by its place in the document."""
    order: dict[str, int] = {}
    stack: list[tuple[str, Any]] = [("", body)]
    while stack:
        path, value = stack.pop()
        order.setdefault(path, len(order))
        if isinstance(value, dict):
            members = [(f"{path}.{k}" if path else str(k), v) for k, v in value.items()]
        elif isinstance(value, list):
            members = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
        else:
            continue
        stack.extend(reversed(members))
    return order
