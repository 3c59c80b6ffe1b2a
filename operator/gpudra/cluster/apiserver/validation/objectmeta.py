"""``metadata`` as kube-apiserver validates it on every kind: the name (or generateName) by the kind's name
rule, labels, annotations (256 KiB in all), ownerReferences (one controller at most), finalizers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from . import names
from .fielderrors import FieldError, Literal, forbidden, invalid_value, required, too_long

NameRule = Callable[[str], Sequence[str]]
ANNOTATIONS_LIMIT = 256 * 1024
_BY_PLURAL: dict[str, NameRule] = {
    "namespaces": names.dns1123_label,
    "services": names.dns1035_label,
}


def name_rule(plural: str) -> NameRule:
    """The rule of a kind's names: a DNS subdomain unless the kind says otherwise."""
    return _BY_PLURAL.get(plural, names.dns1123_subdomain)


def _mask_trailing_dash(prefix: str) -> str:
    return prefix[:-2] + "a" if len(prefix) > 1 and prefix.endswith("-") else prefix


def _annotations(path: str, annotations: dict[str, str]) -> list[FieldError]:
    errors: list[FieldError] = []
    for name in annotations:
        errors += names.each(path, name, names.qualified_name(name.lower()))
    if sum(len(k) + len(v) for k, v in annotations.items()) > ANNOTATIONS_LIMIT:
        errors.append(too_long(path, ANNOTATIONS_LIMIT))
    return errors


def _owner_references(path: str, refs: list[dict[str, Any]]) -> list[FieldError]:
    errors: list[FieldError] = []
    controller = ""
    for ref in refs:
        api_version, kind = str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")
        if not api_version.rpartition("/")[2]:
            errors.append(invalid_value(f"{path}.apiVersion", api_version, "version must not be empty"))
        if not kind:
            errors.append(invalid_value(f"{path}.kind", kind, "must not be empty"))
        for field in ("name", "uid"):
            if not ref.get(field):
                errors.append(invalid_value(f"{path}.{field}", "", "must not be empty"))
        if ref.get("controller") is True:
            here = f"{kind}/{ref.get('name', '')}"
            if controller:
                errors.append(
                    invalid_value(
                        path,
                        Literal("[...]"),
                        'Only one reference can have Controller set to true. Found "true" in references for '
                        f"{controller} and {here}",
                    )
                )
            else:
                controller = here
    return errors


def validate(
    meta: dict[str, Any], *, namespaced: bool, rule: NameRule, path: str = "metadata"
) -> list[FieldError]:
    """The errors of an object's metadata (create and update alike)."""
    errors: list[FieldError] = []
    generate = str(meta.get("generateName") or "")
    if generate:
        errors += names.each(f"{path}.generateName", generate, rule(_mask_trailing_dash(generate)))
    name = str(meta.get("name") or "")
    if not name:
        errors.append(required(f"{path}.name", "name or generateName is required"))
    else:
        errors += names.each(f"{path}.name", name, rule(name))
    namespace = str(meta.get("namespace") or "")
    if namespaced and not namespace:
        errors.append(required(f"{path}.namespace"))
    elif not namespaced and namespace:
        errors.append(forbidden(f"{path}.namespace", "not allowed on this type"))
    generation = meta.get("generation")
    if isinstance(generation, int) and generation < 0:
        errors.append(invalid_value(f"{path}.generation", generation, "must be greater than or equal to 0"))
    errors += names.labels(f"{path}.labels", meta.get("labels") or {})
    errors += _annotations(f"{path}.annotations", meta.get("annotations") or {})
    errors += _owner_references(f"{path}.ownerReferences", meta.get("ownerReferences") or [])
    for finalizer in meta.get("finalizers") or ():
        errors += names.each(f"{path}.finalizers", finalizer, names.qualified_name(finalizer))
    return errors


def template_labels(meta: dict[str, Any], path: str) -> list[FieldError]:
    """The metadata of an object template (a ResourceClaimTemplate's, a pod template's): labels and annotations."""
    return names.labels(f"{path}.labels", meta.get("labels") or {}) + _annotations(
        f"{path}.annotations", meta.get("annotations") or {}
    )
