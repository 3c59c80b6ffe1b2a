"""CustomResourceDefinitions generated from the pydantic models, so the CRDs in crds/ never drift from code.

``crd_for(model)`` is pure: the model's JSON schema becomes a structural openAPIV3Schema ($refs inlined, wire
(camelCase) names, descriptions from docstrings and ``Field(description=...)`` so ``kubectl explain`` helps,
defaults, enums, required lists, ``x-kubernetes-*`` extensions passed through from ``json_schema_extra``,
free-form values marked ``x-kubernetes-preserve-unknown-fields``). ``python -m gpudra.api.crdgen --out crds/``
writes one YAML file per model in ``CRD_MODELS``; ``--check`` only reports drift. Writing files is the only
I/O here and lives in ``main``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from gpudra.api.computedomain import ComputeDomain, ComputeDomainClique
from gpudra.api.crd import CustomResource
from gpudra.api.miglayout import MigLayout
from gpudra.errors import GpudraError

CRD_MODELS: tuple[type[CustomResource], ...] = (ComputeDomain, ComputeDomainClique, MigLayout)

GENERATE_COMMAND = "python -m gpudra.api.crdgen --out crds/"

_API_VERSION_DOC = (
    "APIVersion defines the versioned schema of this representation of an object. Servers should convert "
    "recognized schemas to the latest internal value, and may reject unrecognized values."
)
_KIND_DOC = (
    "Kind is a string value representing the REST resource this object represents. Servers may infer this "
    "from the endpoint the client submits requests to. Cannot be updated. In CamelCase."
)
_DROPPED_KEYS = frozenset({"title", "examples", "$defs", "discriminator"})
_PRESERVE = "x-kubernetes-preserve-unknown-fields"


class CrdGenerationError(GpudraError):
    """A model uses a shape a structural CRD schema cannot express (a union of several types, a recursion)."""


def _null(schema: Mapping[str, Any]) -> bool:
    return dict(schema) == {"type": "null"}


class _Converter:
    """Turns one pydantic JSON schema into a structural Kubernetes schema."""

    def __init__(self, defs: Mapping[str, Any], where: str) -> None:
        self._defs = defs
        self._where = where
        self._resolving: list[str] = []

    def convert(self, schema: Mapping[str, Any], path: str) -> dict[str, Any]:
        node = {key: value for key, value in schema.items() if key not in _DROPPED_KEYS}
        base: dict[str, Any] = {}
        if "$ref" in node:
            base = self._resolve(str(node.pop("$ref")), path)
        for combinator in ("anyOf", "allOf", "oneOf"):
            if combinator in node:
                base = self._merge_union(node.pop(combinator), combinator, path)
        node = {**base, **node}
        if node.get("default", 0) is None:
            del node["default"]
        if "const" in node:
            node["enum"] = [node.pop("const")]
        self._bounds(node, "exclusiveMinimum", "minimum", max)
        self._bounds(node, "exclusiveMaximum", "maximum", min)
        if "properties" in node:
            node["properties"] = {
                name: self.convert(sub, f"{path}.{name}") for name, sub in node["properties"].items()
            }
            node.setdefault("type", "object")
        if not node.get("required", True):
            del node["required"]
        if "items" in node:
            node["items"] = self.convert(node["items"], f"{path}[]")
            node.setdefault("type", "array")
        extra = node.pop("additionalProperties", None)
        if extra is True or (isinstance(extra, dict) and not extra):
            node[_PRESERVE] = True
        elif isinstance(extra, dict):
            node["additionalProperties"] = self.convert(extra, f"{path}{{}}")
        if "type" not in node and not node.get(_PRESERVE) and not node.get("x-kubernetes-int-or-string"):
            node[_PRESERVE] = True
        return node

    def _resolve(self, ref: str, path: str) -> dict[str, Any]:
        name = ref.rsplit("/", 1)[-1]
        if name in self._resolving:
            raise CrdGenerationError(
                f"{self._where}: {path} refers back to {name}; recursive schemas cannot be a CRD"
            )
        self._resolving.append(name)
        try:
            return self.convert(self._defs[name], path)
        finally:
            self._resolving.pop()

    def _merge_union(
        self, options: Sequence[Mapping[str, Any]], combinator: str, path: str
    ) -> dict[str, Any]:
        kept = [option for option in options if not _null(option)]
        if len(kept) == 1:
            return self.convert(kept[0], path)
        types = sorted(str(option.get("type")) for option in kept)
        if combinator == "anyOf" and types == ["integer", "string"]:
            return {"x-kubernetes-int-or-string": True}
        raise CrdGenerationError(
            f"{self._where}: {path} is a union of {len(kept)} shapes ({combinator}); a structural CRD schema "
            "needs one type per field (use a single model, or dict[str, Any] for free-form data)"
        )

    @staticmethod
    def _bounds(node: dict[str, Any], exclusive: str, inclusive: str, stricter: Any) -> None:
        value = node.get(exclusive)
        if value is None or isinstance(value, bool):
            return
        del node[exclusive]
        if (
            inclusive in node
            and stricter(node[inclusive], value) == node[inclusive]
            and node[inclusive] != value
        ):
            return  # the inclusive bound already excludes the exclusive one
        node[inclusive] = value
        node[exclusive] = True


def openapi_schema(model: type[CustomResource]) -> dict[str, Any]:
    """The structural openAPIV3Schema of a CRD model."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    schema = _Converter(raw.get("$defs", {}), model.__name__).convert(raw, model.crd.kind)
    properties = schema.setdefault("properties", {})
    properties["apiVersion"] = {"type": "string", "description": _API_VERSION_DOC}
    properties["kind"] = {"type": "string", "description": _KIND_DOC}
    properties["metadata"] = {"type": "object"}
    schema.pop("required", None)  # as Kubernetes' own types: no top-level field is required by the schema
    schema["type"] = "object"
    return schema


def crd_for(model: type[CustomResource]) -> dict[str, Any]:
    """The CustomResourceDefinition (apiextensions.k8s.io/v1) of a CRD model, as a plain dict."""
    info = model.crd
    names: dict[str, Any] = {
        "kind": info.kind,
        "listKind": f"{info.kind}List",
        "plural": info.plural,
        "singular": info.singular,
    }
    if info.short_names:
        names["shortNames"] = list(info.short_names)
    if info.categories:
        names["categories"] = list(info.categories)
    version: dict[str, Any] = {
        "name": info.version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": openapi_schema(model)},
    }
    if info.status_subresource:
        version["subresources"] = {"status": {}}
    if info.printer_columns:
        columns = []
        for column in info.printer_columns:
            entry: dict[str, Any] = {"name": column.name, "type": column.type, "jsonPath": column.json_path}
            if column.description:
                entry["description"] = column.description
            if column.priority:
                entry["priority"] = column.priority
            columns.append(entry)
        version["additionalPrinterColumns"] = columns
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": info.name},
        "spec": {"group": info.group, "names": names, "scope": info.scope, "versions": [version]},
    }


class _Dumper(yaml.SafeDumper):
    """Block style; multi-line strings as literal blocks so descriptions stay readable."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def file_name(model: type[CustomResource]) -> str:
    """``<group>_<plural>.yaml``, the name controller-gen would use."""
    return f"{model.crd.group}_{model.crd.plural}.yaml"


def render(model: type[CustomResource]) -> str:
    """The YAML text of a model's CRD, with a header naming the command that regenerates it."""
    header = f"# Generated from {model.__module__}.{model.__name__} by `{GENERATE_COMMAND}`. Do not edit.\n"
    body = yaml.dump(crd_for(model), Dumper=_Dumper, sort_keys=True, default_flow_style=False, width=110)
    return header + "---\n" + body


def rendered(models: Sequence[type[CustomResource]] = CRD_MODELS) -> dict[str, str]:
    """File name -> YAML text for every model."""
    return {file_name(model): render(model) for model in models}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpudra.api.crdgen", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("crds"), help="directory to write the CRDs to")
    parser.add_argument("--check", action="store_true", help="only report files that differ; exit 1 if any")
    args = parser.parse_args(argv)
    out: Path = args.out
    stale = []
    for name, text in rendered().items():
        path = out / name
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(name)
        if not args.check:
            out.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    verb = "differ" if args.check else "written"
    print(f"{len(stale)} CRD file(s) {verb} in {out}" + (f": {', '.join(stale)}" if stale else ""))
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
