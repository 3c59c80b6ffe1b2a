"""Field errors as kube-apiserver words them, and the ``Status`` objects that carry them.

A :class:`FieldError` renders exactly as apimachinery's ``field.Error`` does (``Invalid value: "x": detail``,
``Required value``, ``Unsupported value: "a": supported values: "b", "c"`` ...), and :func:`invalid` builds
the 422 ``Invalid`` Status kube-apiserver sends: the message ``<Kind>.<group> "<name>" is invalid: ...``
(one error, or ``[e1, e2]`` for several, duplicates dropped) and one ``details.causes[]`` entry per error
with its field path, which is what kubectl prints (``The ResourceClaim "x" is invalid: spec...: ...``).
Decoding errors (a string where an integer belongs, an unknown field under ``fieldValidation=Strict``) are
400 ``BadRequest`` in Kubernetes, with the message from :func:`undecodable`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..status import APIStatusError

REQUIRED = "FieldValueRequired"
INVALID = "FieldValueInvalid"
TYPE_INVALID = "FieldValueTypeInvalid"
NOT_SUPPORTED = "FieldValueNotSupported"
DUPLICATE = "FieldValueDuplicate"
FORBIDDEN = "FieldValueForbidden"
TOO_LONG = "FieldValueTooLong"
TOO_MANY = "FieldValueTooMany"
NOT_FOUND = "FieldValueNotFound"

_WORDS = {
    REQUIRED: "Required value",
    INVALID: "Invalid value",
    TYPE_INVALID: "Invalid value",
    NOT_SUPPORTED: "Unsupported value",
    DUPLICATE: "Duplicate value",
    FORBIDDEN: "Forbidden",
    TOO_LONG: "Too long",
    TOO_MANY: "Too many",
    NOT_FOUND: "Not found",
}
_VALUELESS = (REQUIRED, FORBIDDEN, TOO_LONG)


class Literal(str):
    """A bad value printed as it is (Kubernetes prints some values as Go structs, e.g. ``{"IntValue":0}``)."""


OMITTED = Literal("")
"""A bad value kube-apiserver leaves out (``field.OmitValueType``): ``Invalid value: <detail>``."""


def go_quote(text: str) -> str:
    """Go's ``%q`` of a string, for the characters Kubernetes objects carry."""
    out = ['"']
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif char == "\r":
            out.append("\\r")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def render_value(value: Any) -> str:
    """A bad value as ``field.Error`` prints it: plain for numbers and booleans, quoted strings, JSON else."""
    if isinstance(value, Literal):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return go_quote(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


@dataclass(frozen=True, slots=True)
class FieldError:
    kind: str
    field: str
    value: Any = None
    detail: str = ""

    def body(self) -> str:
        words = _WORDS[self.kind]
        omitted = self.kind in _VALUELESS or self.value is OMITTED
        text = words if omitted else f"{words}: {render_value(self.value)}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}" if self.field else self.body()


# ---- constructors named as apimachinery's ------------------------------------------------------------------
def required(path: str, detail: str = "") -> FieldError:
    return FieldError(REQUIRED, path, "", detail)


def invalid_value(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(INVALID, path, value, detail)


def type_invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(TYPE_INVALID, path, value, detail)


def not_supported(path: str, value: Any, supported: Sequence[str]) -> FieldError:
    detail = "supported values: " + ", ".join(go_quote(v) for v in supported) if supported else ""
    return FieldError(NOT_SUPPORTED, path, value, detail)


def not_found(path: str, value: Any, detail: str = "") -> FieldError:
    return FieldError(NOT_FOUND, path, value, detail)


def duplicate(path: str, value: Any) -> FieldError:
    return FieldError(DUPLICATE, path, value)


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError(FORBIDDEN, path, "", detail)


def too_long(path: str, limit: int) -> FieldError:
    unit = "byte" if limit == 1 else "bytes"
    return FieldError(TOO_LONG, path, "", f"may not be more than {limit} {unit}")


def too_many(path: str, actual: int, limit: int) -> FieldError:
    unit = "item" if limit == 1 else "items"
    return FieldError(TOO_MANY, path, actual, f"must have at most {limit} {unit}")


# ---- paths -------------------------------------------------------------------------------------------------
def child(path: str, *names: str) -> str:
    for name in names:
        path = f"{path}.{name}" if path else name
    return path


def index(path: str, i: int) -> str:
    return f"{path}[{i}]"


def key(path: str, name: str) -> str:
    return f"{path}[{name}]"


# ---- Status ------------------------------------------------------------------------------------------------
def qualified_kind(kind: str, group: str) -> str:
    return f"{kind}.{group}" if group else kind


def invalid(kind: str, group: str, name: str, errors: Iterable[FieldError]) -> APIStatusError:
    """The 422 ``Invalid`` Status of ``errors`` (at least one)."""
    errors = list(errors)
    unique: list[str] = []
    for error in errors:
        text = str(error)
        if text not in unique:
            unique.append(text)
    summary = unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"
    causes = [{"reason": e.kind, "message": e.body(), "field": e.field} for e in errors]
    return APIStatusError(
        422,
        "Invalid",
        f"{qualified_kind(kind, group)} {go_quote(name)} is invalid: {summary}",
        name=name,
        group=group,
        kind=kind,
        causes=causes,
    )


def undecodable(kind: str, version: str, why: str) -> APIStatusError:
    """The 400 ``BadRequest`` of a body that does not decode into the kind (types, strict unknown fields)."""
    return APIStatusError(
        400, "BadRequest", f'{kind} in version "{version}" cannot be handled as a {kind}: {why}'
    )
