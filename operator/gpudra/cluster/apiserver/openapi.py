"""The schemas of a group-version's OpenAPI v3 document, as kube-apiserver publishes them for ``kubectl explain``.

Built-in kinds come from the OpenAPI definitions of the Kubernetes version the server claims (the ones validation
reads), with every definition they refer to; a custom resource's from its CRD's ``openAPIV3Schema``, named as
kube-apiserver names it (the group reversed, the version, the kind) with ``metadata`` referring to ObjectMeta. Each
kind's schema carries ``x-kubernetes-group-version-kind``, which is how kubectl finds it. References point into
``#/components/schemas``, and a type given as ``[type, "null"]`` is written as the type alone, as the real document
has it.
"""

from __future__ import annotations

from typing import Any

from .registry import Registry, ResourceType
from .validation.gotypes import schemas_for

_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_DEFS = "#/$defs/"
_COMPONENTS = "#/components/schemas/"
_API_VERSION = (
    "APIVersion defines the versioned schema of this representation of an object. Servers should convert "
    "recognized schemas to the latest internal value, and may reject unrecognized values."
)
_KIND = (
    "Kind is a string value representing the REST resource this object represents. Servers may infer this from "
    "the endpoint the client submits requests to. Cannot be updated. In CamelCase."
)


def component_schemas(registry: Registry, group: str, version: str, minor: int) -> dict[str, Any]:
    """``components.schemas`` of the group-version's document: its kinds and everything they refer to."""
    definitions = schemas_for(minor).definitions
    wanted: list[str] = []
    out: dict[str, Any] = {}
    for rt in registry.in_group_version(group, version):
        if rt.schema is not None:
            out[_custom_name(rt)] = _custom(rt)
            wanted.append(_OBJECT_META)
        else:
            name = schemas_for(minor).definition_of(rt.group, rt.version, rt.kind)
            if name is not None:
                wanted.append(name)
    while wanted:
        name = wanted.pop()
        if name in out or name not in definitions:
            continue
        out[name] = _v3(definitions[name], wanted)
    return out


def _custom_name(rt: ResourceType) -> str:
    return ".".join([*reversed(rt.group.split(".")), rt.version, rt.kind])


def _custom(rt: ResourceType) -> dict[str, Any]:
    assert rt.schema is not None
    schema = _v3(rt.schema, [])
    properties = dict(schema.get("properties") or {})
    properties["apiVersion"] = {"type": "string", "description": _API_VERSION}
    properties["kind"] = {"type": "string", "description": _KIND}
    properties["metadata"] = {
        "allOf": [{"$ref": _COMPONENTS + _OBJECT_META}],
        "description": "Standard object's metadata.",
    }
    return {
        **schema,
        "type": "object",
        "properties": properties,
        "x-kubernetes-group-version-kind": [{"group": rt.group, "kind": rt.kind, "version": rt.version}],
    }


def _v3(schema: Any, refs: list[str]) -> Any:
    """The schema with references into components (each one named is appended to ``refs``) and plain types."""
    if isinstance(schema, list):
        return [_v3(item, refs) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str) and value.startswith(_DEFS):
            refs.append(value[len(_DEFS) :])
            out[key] = _COMPONENTS + value[len(_DEFS) :]
        elif key == "type" and isinstance(value, list):
            out[key] = next((t for t in value if t != "null"), "object")
        elif key == "additionalProperties" and isinstance(value, bool):
            continue  # the strict definitions close every object; the served document does not say so
        elif key in ("properties", "patternProperties"):
            out[key] = {name: _v3(sub, refs) for name, sub in value.items()}
        else:
            out[key] = _v3(value, refs)
    return out
