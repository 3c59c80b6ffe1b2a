"""How later Kubernetes versions word the same resource.k8s.io errors (KubeVersion): the validators write 1.34's
field errors, and this rewrites them as the emulated version reports them. From 1.35 a fully qualified name
"must be a domain and a name separated by a slash"; from 1.36 declarative validation (GA) reports duplicates,
attributes with two values, bad attribute names, opaque driver names and an immutable claim spec in its own
words. The 1.36+ wording is kube-apiserver 1.37.2's, recorded on the bad-input corpus (tests/badinput); 1.36 was
not run here.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from ..versions import KubeVersion
from .fielderrors import DUPLICATE, INVALID, REQUIRED, FieldError, Literal

_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_WHOLE_ITEM = re.compile(r"(\.requests|\.firstAvailable|\.sharedCounters)\[\d+\]\.name$")
_BY_KEY = re.compile(r"\.devices\[\d+\]\.name$")
_ATTRIBUTE_KEY = re.compile(r"(\.attributes)\[[^\]]*\]$")
_LIST_VALUES = ("int", "bool", "string", "version", "ints", "bools", "strings", "versions")
_LOWERCASE_SUBDOMAIN = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters"


def _at(obj: Any, path: str) -> Any:
    """The value at a field path such as ``spec.devices.requests[1]`` (None when it is not there)."""
    for name, index in _STEP.findall(path):
        if name:
            obj = obj.get(name) if isinstance(obj, dict) else None
        else:
            obj = obj[int(index)] if isinstance(obj, list) and int(index) < len(obj) else None
    return obj


def _go_json(value: Any) -> Literal:
    """A value as Go's encoding/json writes the struct: fields in the order they came (the decoder keeps the
    request's order and appends defaults, which is the struct's order for the usual manifests)."""
    return Literal(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def _declarative(error: FieldError, obj: dict[str, Any]) -> FieldError:
    if error.kind == DUPLICATE and _WHOLE_ITEM.search(error.field):
        item = error.field.removesuffix(".name")
        return replace(error, field=item, value=_go_json(_at(obj, item)))
    if error.kind == DUPLICATE and _BY_KEY.search(error.field):
        return replace(error, field=error.field.removesuffix(".name"))
    if error.kind == REQUIRED and error.detail == "exactly one value must be specified":
        return replace(
            error,
            kind=INVALID,
            value="",
            detail="must specify one of: " + ", ".join(f"`{k}`" for k in _LIST_VALUES),
        )
    if error.kind != INVALID:
        return error
    if error.detail == "exactly one value must be specified" and _ATTRIBUTE_KEY.search(error.field):
        value = _at(obj, error.field.rsplit("[", 1)[0]) or {}
        key = error.field.rsplit("[", 1)[1].rstrip("]")
        present = [k for k in _LIST_VALUES if k in (value.get(key) or {})]
        return replace(
            error,
            value=Literal(json.dumps("{" + ", ".join(present) + "}")),
            detail="must specify exactly one of: " + ", ".join(f"`{k}`" for k in _LIST_VALUES),
        )
    if "C identifier" in error.detail and _ATTRIBUTE_KEY.search(error.field):
        return replace(error, field=_ATTRIBUTE_KEY.sub(r"\1", error.field))
    if error.field.endswith(".opaque.driver") and error.detail.startswith(_LOWERCASE_SUBDOMAIN):
        detail = error.detail.replace(
            _LOWERCASE_SUBDOMAIN, "an RFC 1123 subdomain must consist of alphanumeric characters"
        ).replace("(e.g. 'example.com'", "(e.g. 'Example.com'")
        return replace(error, detail=detail)
    if error.detail == "field is immutable" and error.field == "spec":
        return replace(error, value=Literal("null"))
    return error


def reword(errors: list[FieldError], obj: dict[str, Any], kube: KubeVersion) -> list[FieldError]:
    """``errors`` of a resource.k8s.io object as ``kube`` words them."""
    if kube.qualified_name_wording:
        errors = [
            replace(e, detail="a fully qualified name must be a domain and a name separated by a slash")
            if e.detail == "must include a domain"
            else e
            for e in errors
        ]
    if kube.declarative:
        errors = [_declarative(e, obj) for e in errors]
    return errors
