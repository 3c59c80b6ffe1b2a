"""Protobuf messages of the Kubernetes API <-> the JSON objects the embedded API server stores.

The result is what the Go client would have sent as JSON for the same object. The protobuf encoding alone does
not say it: Go writes every non-pointer field even when it is zero, inlines embedded structs into their parent's
JSON, and gives a few types a JSON form of their own. So each field is read with what ``gofields.json`` says of
its Go struct field (JSON name, ``""`` when inlined; omitempty; pointer), and these types are converted by hand:

- ``Time`` <-> ``"2006-01-02T15:04:05Z"`` (seconds; an empty message is the zero time, omitted);
  ``MicroTime`` <-> ``"2006-01-02T15:04:05.000000Z"``;
- ``Quantity`` <-> its string (a JSON number is accepted as Go accepts it); ``IntOrString`` <-> int or string;
- ``RawExtension`` and ``FieldsV1`` <-> the JSON value their bytes hold;
- ``bytes`` fields (Secret data) <-> base64 strings.

A zero scalar is kept when its Go field is a pointer (``replicas: 0``) or has no omitempty (``ready: false``),
and dropped otherwise; empty lists and maps are dropped (Go's ``null`` and absent mean the same).
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from gpudra.api.timestamps import parse_rfc3339, rfc3339

FIELDS_FILE = Path(__file__).parent / "gofields.json"
_META = "k8s.io.apimachinery.pkg.apis.meta.v1."
TIME = _META + "Time"
MICRO_TIME = _META + "MicroTime"
FIELDS_V1 = _META + "FieldsV1"
QUANTITY = "k8s.io.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "k8s.io.apimachinery.pkg.util.intstr.IntOrString"
RAW_EXTENSION = "k8s.io.apimachinery.pkg.runtime.RawExtension"
_OMIT: Any = object()  # a value Go leaves out of its JSON


class ConversionError(ValueError):
    """A value that does not fit the field it is meant for; ``path`` is the JSON path of the field."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path or '<root>'}: {message}")
        self.path = path


@dataclass(frozen=True, slots=True)
class GoField:
    json: str  # "": an embedded struct, inlined into its parent's JSON
    omitempty: bool
    pointer: bool


@functools.cache
def go_fields() -> dict[str, dict[str, GoField]]:
    table = json.loads(FIELDS_FILE.read_text())
    return {
        message: {name: GoField(str(j), bool(o), bool(p)) for name, (j, o, p) in fields.items()}
        for message, fields in table.items()
    }


def _field(message: str, field: FieldDescriptor) -> GoField:
    found = go_fields().get(message, {}).get(field.name)
    return found if found is not None else GoField(field.name, True, False)


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _repeated(field: FieldDescriptor) -> bool:
    return field.is_repeated


def _map_value(field: FieldDescriptor) -> FieldDescriptor:
    assert field.message_type is not None
    return field.message_type.fields_by_name["value"]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# --------------------------------------------------------------------------- protobuf -> JSON
def _time_out(message: Any) -> Any:
    if not message.HasField("seconds"):
        return _OMIT
    return rfc3339(message.seconds)


def _micro_time_out(message: Any) -> Any:
    if not message.HasField("seconds") and not message.HasField("nanos"):
        return _OMIT
    when = datetime.fromtimestamp(message.seconds, UTC).replace(microsecond=message.nanos // 1000)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _int_or_string_out(message: Any) -> Any:
    return message.strVal if message.type == 1 else message.intVal


def _raw_out(raw: bytes) -> Any:
    if not raw:
        return _OMIT
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ConversionError("", f"the raw bytes are not JSON: {exc}") from exc


_SPECIAL_OUT: dict[str, Callable[[Any], Any]] = {
    TIME: _time_out,
    MICRO_TIME: _micro_time_out,
    QUANTITY: lambda m: m.string,
    INT_OR_STRING: _int_or_string_out,
    RAW_EXTENSION: lambda m: _raw_out(m.raw),
    FIELDS_V1: lambda m: _raw_out(m.Raw),
}


def to_json(message: Message) -> Any:
    """The JSON value (usually a dict) Go would write for ``message``."""
    descriptor = message.DESCRIPTOR
    special = _SPECIAL_OUT.get(descriptor.full_name)
    if special is not None:
        return special(message)
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        info = _field(descriptor.full_name, field)
        if not info.json and field.message_type is not None and not _repeated(field):
            inlined = to_json(value)
            if isinstance(inlined, dict):
                out.update(inlined)
            continue
        converted = _value_out(field, value, info)
        if converted is not _OMIT:
            out[info.json] = converted
    return out


def _value_out(field: FieldDescriptor, value: Any, info: GoField) -> Any:
    if _is_map(field):
        item = _map_value(field)
        return {key: _single_out(item, v) for key, v in value.items()} if value else _OMIT
    if _repeated(field):
        return [_single_out(field, v) for v in value] if value else _OMIT
    if field.message_type is not None:
        return to_json(value)  # _OMIT for the zero time
    single = _single_out(field, value)
    if not single and info.omitempty and not info.pointer:
        return _OMIT
    return single


def _single_out(field: FieldDescriptor, value: Any) -> Any:
    if field.message_type is not None:
        converted = to_json(value)
        return None if converted is _OMIT else converted
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode()
    return value


# --------------------------------------------------------------------------- JSON -> protobuf
def _parse_time(value: Any, path: str, layout: str) -> datetime:
    if not isinstance(value, str):
        raise ConversionError(path, f"expected a time string, got {type(value).__name__}")
    try:
        when = parse_rfc3339(value)
    except ValueError as exc:
        raise ConversionError(path, f"{value!r} is not an RFC 3339 {layout}") from exc
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _time_in(message: Any, value: Any, path: str) -> None:
    message.seconds = int(_parse_time(value, path, "time").timestamp() // 1)


def _micro_time_in(message: Any, value: Any, path: str) -> None:
    when = _parse_time(value, path, "time with microseconds")
    message.seconds = int(when.replace(microsecond=0).timestamp())
    message.nanos = when.microsecond * 1000


def _quantity_in(message: Any, value: Any, path: str) -> None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConversionError(path, f"a quantity must be a string or a number, not {type(value).__name__}")
    message.string = value if isinstance(value, str) else json.dumps(value)


def _int_or_string_in(message: Any, value: Any, path: str) -> None:
    if isinstance(value, str):
        message.type, message.strVal = 1, value
    elif isinstance(value, int) and not isinstance(value, bool):
        message.type, message.intVal = 0, value
    else:
        raise ConversionError(path, f"expected an integer or a string, got {type(value).__name__}")


def _raw_in(attribute: str) -> Callable[[Any, Any, str], None]:
    def convert(message: Any, value: Any, path: str) -> None:
        setattr(message, attribute, json.dumps(value, separators=(",", ":")).encode())

    return convert


_SPECIAL_IN: dict[str, Callable[[Any, Any, str], None]] = {
    TIME: _time_in,
    MICRO_TIME: _micro_time_in,
    QUANTITY: _quantity_in,
    INT_OR_STRING: _int_or_string_in,
    RAW_EXTENSION: _raw_in("raw"),
    FIELDS_V1: _raw_in("Raw"),
}


@functools.cache
def _json_index(descriptor: Descriptor) -> dict[str, tuple[FieldDescriptor, ...]]:
    """JSON key -> the fields to walk to it (more than one through inlined structs)."""
    index: dict[str, tuple[FieldDescriptor, ...]] = {}
    for field in descriptor.fields:
        info = _field(descriptor.full_name, field)
        if not info.json and field.message_type is not None and not _repeated(field):
            for key, route in _json_index(field.message_type).items():
                index.setdefault(key, (field, *route))
        else:
            index[info.json] = (field,)
    return index


def from_json(message: Message, value: Any, path: str = "") -> Message:
    """Fill ``message`` from a JSON value; unknown keys are dropped, as Go's decoder drops them."""
    descriptor = message.DESCRIPTOR
    special = _SPECIAL_IN.get(descriptor.full_name)
    if special is not None:
        special(message, value, path)
        return message
    if not isinstance(value, dict):
        raise ConversionError(path, f"expected an object, got {type(value).__name__}")
    index = _json_index(descriptor)
    for key, item in value.items():
        route = index.get(key)
        if route is None or item is None:
            continue
        target: Any = message
        for step in route[:-1]:
            target = getattr(target, step.name)
            target.SetInParent()
        _set(target, route[-1], item, _join(path, key))
    return message


def _set(target: Any, field: FieldDescriptor, value: Any, path: str) -> None:
    if _is_map(field):
        if not isinstance(value, dict):
            raise ConversionError(path, f"expected an object, got {type(value).__name__}")
        container = getattr(target, field.name)
        item = _map_value(field)
        for key, v in value.items():
            if item.message_type is not None:
                from_json(container[key], v, _join(path, key))
            elif v is not None:
                converted = _scalar(item, v, _join(path, key))
                try:
                    container[key] = converted
                except (ValueError, TypeError) as exc:
                    raise ConversionError(_join(path, key), str(exc)) from exc
        return
    if _repeated(field):
        if not isinstance(value, list):
            raise ConversionError(path, f"expected a list, got {type(value).__name__}")
        container = getattr(target, field.name)
        for i, v in enumerate(value):
            if field.message_type is not None:
                from_json(container.add(), v, f"{path}[{i}]")
            else:
                converted = _scalar(field, v, f"{path}[{i}]")
                try:
                    container.append(converted)
                except (ValueError, TypeError) as exc:
                    raise ConversionError(f"{path}[{i}]", str(exc)) from exc
        return
    if field.message_type is not None:
        sub = getattr(target, field.name)
        sub.SetInParent()
        from_json(sub, value, path)
        return
    converted = _scalar(field, value, path)
    try:
        setattr(target, field.name, converted)
    except (ValueError, TypeError) as exc:  # out of the field's range
        raise ConversionError(path, str(exc)) from exc


def _scalar(field: FieldDescriptor, value: Any, path: str) -> Any:
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        if isinstance(value, str):
            return value
    elif kind == FieldDescriptor.TYPE_BOOL:
        if isinstance(value, bool):
            return value
    elif kind == FieldDescriptor.TYPE_BYTES:
        if isinstance(value, str):
            try:
                return base64.b64decode(value, validate=True)
            except binascii.Error as exc:
                raise ConversionError(path, f"not base64: {exc}") from exc
    elif isinstance(value, int) and not isinstance(value, bool):
        return value
    elif isinstance(value, float) and value.is_integer():
        return int(value)
    raise ConversionError(
        path, f"{value!r} does not fit a field of protobuf type {_TYPE_NAMES.get(kind, kind)}"
    )


_TYPE_NAMES = {
    FieldDescriptor.TYPE_STRING: "string",
    FieldDescriptor.TYPE_BOOL: "bool",
    FieldDescriptor.TYPE_BYTES: "bytes",
    FieldDescriptor.TYPE_INT32: "int32",
    FieldDescriptor.TYPE_INT64: "int64",
}
