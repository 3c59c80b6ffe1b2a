"""The Go types of the built-in kinds, from Kubernetes' own OpenAPI documents (the ``kubernetes-validate``
package ships them per Kubernetes version), for the version the server claims in ``/version``.

kube-apiserver decodes a request body into Go structs before it validates anything: a field of the wrong JSON
type and, with ``fieldValidation=Strict``, a field the struct does not have, fail the request with 400. A
:class:`GoType` is what the decoder needs to do the same: the kind of value a field takes, the name Go prints
for its type (``int64``, ``[]v1.DeviceRequest``, ``v1.ExactDeviceRequest``), and a struct's fields.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_SPECIAL = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": ("quantity", "resource.Quantity"),
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": ("intorstring", "intstr.IntOrString"),
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": ("time", "v1.Time"),
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime": ("time", "v1.MicroTime"),
    "io.k8s.apimachinery.pkg.runtime.RawExtension": ("any", "runtime.RawExtension"),
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1": ("any", "v1.FieldsV1"),
}


@dataclass(eq=False)
class GoType:
    """``kind`` is struct, array, map, string, bool, int64, int32, float64, quantity, intorstring, time or
    any; ``go`` the type as Go names it in decoding errors; ``struct`` the struct's own name."""

    kind: str
    go: str
    struct: str = ""
    elem: GoType | None = None
    definition: str = ""
    _fields: dict[str, GoType] | None = field(default=None, repr=False)
    _schemas: Schemas | None = field(default=None, repr=False)

    @property
    def fields(self) -> dict[str, GoType]:
        if self._fields is None:
            assert self._schemas is not None
            self._fields = self._schemas.fields_of(self.definition)
        return self._fields


_SCALARS = {
    ("string", None): ("string", "string"),
    ("string", "byte"): ("string", "[]uint8"),
    ("boolean", None): ("bool", "bool"),
    ("integer", "int64"): ("int64", "int64"),
    ("integer", "int32"): ("int32", "int32"),
    ("integer", None): ("int64", "int64"),
    ("number", "double"): ("float64", "float64"),
    ("number", None): ("float64", "float64"),
}


def _primary(schema: dict[str, Any]) -> str | None:
    declared = schema.get("type")
    if isinstance(declared, list):
        return next((t for t in declared if t != "null"), None)
    return declared if isinstance(declared, str) else None


def _short(definition: str) -> tuple[str, str]:
    """(package, type) of an OpenAPI definition name: io.k8s.api.resource.v1.Device -> (v1, Device)."""
    parts = definition.split(".")
    return parts[-2], parts[-1]


class Schemas:
    """The built-in kinds of one Kubernetes version, by (group, version, kind)."""

    def __init__(self, definitions: dict[str, dict[str, Any]]) -> None:
        self._definitions = definitions
        self._types: dict[str, GoType] = {}
        self._kinds: dict[tuple[str, str, str], str] = {}
        for name, schema in definitions.items():
            for gvk in schema.get("x-kubernetes-group-version-kind") or ():
                if "metadata" in (schema.get("properties") or {}):
                    self._kinds[(gvk.get("group", ""), gvk.get("version", ""), gvk.get("kind", ""))] = name

    def kind(self, group: str, version: str, kind: str) -> GoType | None:
        name = self._kinds.get((group, version, kind))
        return None if name is None else self.named(name)

    def definition_of(self, group: str, version: str, kind: str) -> str | None:
        """The OpenAPI definition name of a built-in kind."""
        return self._kinds.get((group, version, kind))

    @property
    def definitions(self) -> dict[str, dict[str, Any]]:
        return self._definitions

    def named(self, definition: str) -> GoType:
        found = self._types.get(definition)
        if found is None:
            found = self._types[definition] = self._build(definition)
        return found

    def _build(self, definition: str) -> GoType:
        special = _SPECIAL.get(definition)
        if special is not None:
            return GoType(special[0], special[1], definition=definition)
        schema = self._definitions.get(definition) or {}
        package, name = _short(definition)
        if "properties" in schema:
            return GoType("struct", f"{package}.{name}", name, definition=definition, _schemas=self)
        return self._type(schema) if _primary(schema) else GoType("any", f"{package}.{name}")

    def _type(self, schema: dict[str, Any]) -> GoType:
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return self.named(ref.rsplit("/", 1)[-1])
        primary = _primary(schema)
        if primary == "array":
            elem = self._type(schema.get("items") or {})
            return GoType("array", f"[]{elem.go}", elem=elem)
        if primary == "object":
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                elem = self._type(extra)
                return GoType("map", f"map[string]{elem.go}", elem=elem)
            return GoType("any", "map[string]interface {}")
        scalar = _SCALARS.get((primary or "", schema.get("format")))
        if scalar is None:
            return GoType("any", "interface {}")
        return GoType(scalar[0], scalar[1])

    def fields_of(self, definition: str) -> dict[str, GoType]:
        properties = (self._definitions.get(definition) or {}).get("properties") or {}
        return {name: self._type(sub) for name, sub in properties.items()}

    @property
    def object_meta(self) -> GoType:
        return self.named(_OBJECT_META)


LATER_FIELDS = {
    ("io.k8s.api.core.v1.ResourceHealth", "message"): 36,
    **{
        ("io.k8s.api.resource.v1.DeviceAttribute", kind): 36
        for kind in ("ints", "bools", "strings", "versions")
    },
}
"""Fields of a later Kubernetes version (definition, field -> the minor that added it) that a server claiming an
older one keeps all the same: the stand-in kubelet writes pod status as 1.37's does (ResourceHealthStatusMessage);
the list-typed attribute values (1.36) are decoded so that the DRAListTypeAttributes gate decides: kept with it
on, dropped on write with it off, as kube-apiserver does."""


def _definitions(minor: int) -> dict[str, dict[str, Any]]:
    root = resources.files("kubernetes_validate") / "kubernetes-json-schema"
    document = root / f"v1.{minor}.0-local-strict" / "_definitions.json"
    definitions: dict[str, dict[str, Any]] = json.loads(document.read_text())["$defs"]
    return definitions


@functools.cache
def schemas_for(minor: int) -> Schemas:
    """The OpenAPI definitions of Kubernetes 1.<minor> shipped by ``kubernetes-validate``, plus LATER_FIELDS."""
    definitions = _definitions(minor)
    for (definition, name), added in LATER_FIELDS.items():
        properties = definitions[definition]["properties"]
        if name not in properties:
            properties[name] = _definitions(added)[definition]["properties"][name]
    return Schemas(definitions)
