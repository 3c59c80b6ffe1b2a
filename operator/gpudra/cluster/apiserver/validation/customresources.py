"""Custom resources against the structural schema of their CRD version, as apiextensions-apiserver does it.

Pruning drops the fields the schema does not declare (kept under ``x-kubernetes-preserve-unknown-fields``)
and ``null`` values, and lists what it dropped for strict field validation. Validation reports types, required
properties, enums, minimum/maximum, lengths, item counts and patterns with kube-openapi's words
(``spec.numNodes in body should be greater than or equal to 0``), then runs the ``x-kubernetes-validations``
CEL rules, unless a blocking error (a wrong type, a missing or unsupported value, too long, too many) came first:
then one more cause says that some rules were not checked, as Kubernetes says it.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

from . import celrules
from .fielderrors import (
    OMITTED,
    FieldError,
    Literal,
    duplicate,
    invalid_value,
    not_supported,
    required,
    too_long,
    too_many,
    type_invalid,
)

BLOCKING = (
    "FieldValueNotSupported",
    "FieldValueRequired",
    "FieldValueTooLong",
    "FieldValueTooMany",
    "FieldValueTypeInvalid",
)
NOT_CHECKED = (
    "some validation rules were not checked because the object was invalid; correct the existing errors to "
    "complete validation"
)
Errors = list[FieldError]


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


# ---- pruning -----------------------------------------------------------------------------------------------
def prune(value: Any, schema: dict[str, Any], path: str, unknown: list[str]) -> Any:
    """``value`` without undeclared fields and nulls; the dropped fields' paths are appended to ``unknown``."""
    if isinstance(value, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        keep_all = schema.get("x-kubernetes-preserve-unknown-fields") is True
        out: dict[str, Any] = {}
        for name, item in value.items():
            here = _join(path, name)
            if item is None and not _nullable(properties, extra, name):
                continue
            if isinstance(properties, dict) and name in properties:
                out[name] = prune(item, properties[name] or {}, here, unknown)
            elif isinstance(extra, dict):
                out[name] = prune(item, extra, here, unknown)
            elif (
                keep_all or extra is True or (properties is None and extra is None and not schema.get("type"))
            ):
                out[name] = item
            else:
                unknown.append(here)
        return out
    if isinstance(value, list):
        items = celrules.part(schema, "items")
        return [prune(item, items, f"{path}[{i}]", unknown) for i, item in enumerate(value)]
    return value


def _nullable(properties: Any, extra: Any, name: str) -> bool:
    sub = properties.get(name) if isinstance(properties, dict) else extra
    return isinstance(sub, dict) and sub.get("nullable") is True


# ---- schema validation -------------------------------------------------------------------------------------
def _type_ok(value: Any, schema: dict[str, Any]) -> bool:
    expected = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
    if not expected:
        return True
    actual = type_name(value)
    return (
        actual == expected
        or (expected == "number" and actual == "integer")
        or (value is None and schema.get("nullable") is True)
    )


def _scalar_checks(value: Any, schema: dict[str, Any], path: str) -> Errors:
    errors: Errors = []
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        errors.append(not_supported(path, value, [v if isinstance(v, str) else repr(v) for v in enum]))
    if isinstance(value, int | float) and not isinstance(value, bool):
        for key, exclusive, word in (
            ("minimum", "exclusiveMinimum", "greater"),
            ("maximum", "exclusiveMaximum", "less"),
        ):
            bound = schema.get(key)
            if bound is None:
                continue
            strict = schema.get(exclusive) is True
            bad = (
                (value <= bound if strict else value < bound)
                if word == "greater"
                else (value >= bound if strict else value > bound)
            )
            if bad:
                relation = f"{word} than" if strict else f"{word} than or equal to"
                errors.append(invalid_value(path, value, f"{path} in body should be {relation} {bound}"))
    if isinstance(value, str):
        if schema.get("maxLength") is not None and len(value) > schema["maxLength"]:
            errors.append(too_long(path, int(schema["maxLength"])))
        if schema.get("minLength") is not None and len(value) < schema["minLength"]:
            errors.append(
                invalid_value(
                    path, value, f"{path} in body should be at least {schema['minLength']} chars long"
                )
            )
        pattern = schema.get("pattern")
        if pattern and re.search(pattern, value) is None:
            errors.append(invalid_value(path, value, f"{path} in body should match '{pattern}'"))
    return errors


def validate(value: Any, schema: dict[str, Any], path: str = "") -> Errors:
    """Schema errors of ``value`` (already pruned and defaulted)."""
    if not _type_ok(value, schema):
        actual = type_name(value)
        detail = f'{path} in body must be of type {schema.get("type")}: "{actual}"'
        return [type_invalid(path, actual, detail)]
    errors = _scalar_checks(value, schema, path)
    if isinstance(value, list):
        if schema.get("maxItems") is not None and len(value) > schema["maxItems"]:
            errors.append(too_many(path, len(value), int(schema["maxItems"])))
        if schema.get("minItems") is not None and len(value) < schema["minItems"]:
            errors.append(
                invalid_value(
                    path, len(value), f"{path} in body should have at least {schema['minItems']} items"
                )
            )
        items = celrules.part(schema, "items")
        for i, item in enumerate(value):
            errors += validate(item, items, f"{path}[{i}]")
    elif isinstance(value, dict):
        properties = celrules.part(schema, "properties")
        for name in schema.get("required") or ():
            if name not in value:
                errors.append(required(_join(path, name)))
        extra = schema.get("additionalProperties")
        for name, item in value.items():
            sub = properties.get(name) if name in properties else (extra if isinstance(extra, dict) else None)
            if sub is None or (name == "metadata" and not path):
                continue
            errors += validate(item, sub, _join(path, name))
    return errors


def _unique_items(value: list[Any], schema: dict[str, Any], path: str) -> Errors:
    """A ``map`` list's items are unique by their ``x-kubernetes-list-map-keys``, a ``set`` list's by value: each
    later duplicate is a ``Duplicate value`` (of its keys, for a map), as apiextensions-apiserver reports it."""
    kind = schema.get("x-kubernetes-list-type")
    keys = [str(k) for k in schema.get("x-kubernetes-list-map-keys") or ()]
    errors: Errors = []
    seen: list[Any] = []
    for i, item in enumerate(value):
        if kind == "map" and isinstance(item, dict):
            identity: Any = {k: item[k] for k in keys if k in item}
        elif kind == "set":
            identity = item
        else:
            continue
        if identity in seen:
            errors.append(duplicate(f"{path}[{i}]", identity))
        else:
            seen.append(identity)
    return errors


def list_sets_and_maps(value: Any, schema: dict[str, Any], path: str = "") -> Errors:
    """Duplicates in every ``x-kubernetes-list-type: map`` or ``set`` list of ``value``."""
    errors: Errors = []
    if isinstance(value, list):
        errors += _unique_items(value, schema, path)
        items = celrules.part(schema, "items")
        for i, item in enumerate(value):
            errors += list_sets_and_maps(item, items, f"{path}[{i}]")
    elif isinstance(value, dict):
        properties = celrules.part(schema, "properties")
        extra = schema.get("additionalProperties")
        for name, item in value.items():
            sub = properties.get(name) if name in properties else (extra if isinstance(extra, dict) else None)
            if sub is not None and not (name == "metadata" and not path):
                errors += list_sets_and_maps(item, sub, _join(path, name))
    return errors


# ---- CEL rules ---------------------------------------------------------------------------------------------
def has_rules(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    if schema.get("x-kubernetes-validations"):
        return True
    subs = [
        *(schema.get("properties") or {}).values(),
        schema.get("items"),
        schema.get("additionalProperties"),
    ]
    return any(has_rules(s) for s in subs)


def _rule_errors(value: Any, old: Any, schema: dict[str, Any], path: str, with_value: bool) -> Errors:
    errors: Errors = []
    for rule in schema.get("x-kubernetes-validations") or ():
        text = str(rule.get("rule") or "")
        if celrules.uses_old_self(text) and old is None:
            continue
        try:
            outcome = celrules.evaluate(
                text,
                celrules.cel_value(value, schema),
                None if old is None else celrules.cel_value(old, schema),
            )
        except celrules.RuleError as error:
            outcome = str(error)
        if outcome is True:
            continue
        here = path + str(rule.get("fieldPath") or "")
        message = outcome if isinstance(outcome, str) else str(rule.get("message") or f"failed rule: {text}")
        kind = str(rule.get("reason") or "FieldValueInvalid")
        shown = (type_name(value) if with_value else OMITTED) if kind != "FieldValueRequired" else ""
        errors.append(FieldError(kind, here, shown, message))
    return errors


def rules(value: Any, old: Any, schema: dict[str, Any], path: str = "", with_value: bool = True) -> Errors:
    """Errors of every ``x-kubernetes-validations`` rule that applies to ``value`` (``old``: on update;
    ``with_value``: each error shows the value's type, as before 1.37)."""
    errors = _rule_errors(value, old, schema, path, with_value) if value is not None else []
    if isinstance(value, dict):
        properties = celrules.part(schema, "properties")
        extra = schema.get("additionalProperties")
        for name, item in value.items():
            sub = properties.get(name, extra)
            if isinstance(sub, dict) and not (name == "metadata" and not path):
                before = old.get(name) if isinstance(old, dict) else None
                errors += rules(item, before, sub, _join(path, name), with_value)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        keys = (
            schema.get("x-kubernetes-list-map-keys")
            if schema.get("x-kubernetes-list-type") == "map"
            else None
        )
        paired = _Pairing(old, keys)
        for i, item in enumerate(value):
            errors += rules(item, paired.old_of(item), schema["items"], f"{path}[{i}]", with_value)
    return errors


class _Pairing:
    """Pairs each item of a new list-map with its old self (same keys; the first such): by a dict of the old
    items, not a scan of the old list per item (a status list of a few dozen entries made that the costliest part
    of a write)."""

    def __init__(self, old: Any, keys: Any) -> None:
        self.keys = tuple(keys) if keys else ()
        self.old = [o for o in old if isinstance(o, dict)] if self.keys and isinstance(old, list) else []
        self.by_key: dict[Any, Any] = {}
        for item in reversed(self.old):
            with contextlib.suppress(TypeError):  # an unhashable key value: found by the scan instead
                self.by_key[self._key(item)] = item

    def _key(self, item: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(item.get(k) for k in self.keys)

    def old_of(self, item: Any) -> Any:
        if not self.old or not isinstance(item, dict):
            return None
        wanted = self._key(item)
        try:
            return self.by_key.get(wanted)
        except TypeError:
            return next((o for o in self.old if self._key(o) == wanted), None)


def check(
    obj: dict[str, Any], old: dict[str, Any] | None, schema: dict[str, Any], *, rule_values: bool = True
) -> Errors:
    """Schema errors and duplicates in list-maps and list-sets, then the CEL rules' (or the "not checked" cause
    after a blocking error), in apiextensions-apiserver's order; ``rule_values``: a rule's error shows the value's
    type (``Invalid value: "object": ...``), as kube-apiserver did before 1.37."""
    errors = validate(obj, schema) + list_sets_and_maps(obj, schema)
    if not has_rules(schema):
        return errors
    if any(e.kind in BLOCKING for e in errors):
        return [*errors, invalid_value("<nil>", Literal("null"), NOT_CHECKED)]
    return errors + rules(obj, old, schema, with_value=rule_values)


def rule_compile_errors(schema: Any, path: str) -> Errors:
    """A CRD's rules that do not compile, at ``...x-kubernetes-validations[i].rule``."""
    if not isinstance(schema, dict):
        return []
    errors: Errors = []
    for i, rule in enumerate(schema.get("x-kubernetes-validations") or ()):
        try:
            celrules.compile_rule(str(rule.get("rule") or ""))
        except celrules.RuleError as error:
            errors.append(
                invalid_value(f"{path}.x-kubernetes-validations[{i}].rule", rule.get("rule", ""), str(error))
            )
    for name, sub in (schema.get("properties") or {}).items():
        errors += rule_compile_errors(sub, f"{path}.properties[{name}]")
    for key in ("items", "additionalProperties"):
        errors += rule_compile_errors(schema.get(key), f"{path}.{key}")
    return errors
