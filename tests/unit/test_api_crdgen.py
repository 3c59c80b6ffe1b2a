"""CRDs generated from the models: committed files match, schemas are structural, odd shapes are handled."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from pydantic import Field

from gpudra.api.base import WireModel
from gpudra.api.crd import CrdInfo, CustomResource
from gpudra.api.crdgen import CRD_MODELS, CrdGenerationError, crd_for, main, openapi_schema, rendered
from gpudra.cluster.sim.gpufault import GpuFault

CRDS = Path(__file__).resolve().parents[2] / "crds"
NOT_GENERATED = {
    "kustomization.yaml",
    "kopf.dev_clusterkopfpeerings.yaml",
}  # kopf's CRD is kopf's, not a model
FIX = "run `python -m gpudra.api.crdgen --out crds/` and commit the result"


def walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every schema node under ``node`` (itself included) with its path."""
    found = [(path or "<root>", node)]
    for name, sub in node.get("properties", {}).items():
        found += walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        found += walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        found += walk(node["additionalProperties"], f"{path}{{}}")
    return found


def structural_problems(schema: dict[str, Any]) -> list[str]:
    problems = []
    for path, node in walk(schema):
        if not ({"type", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string"} & node.keys()):
            problems.append(f"{path}: no type")
        for key in ("$ref", "$defs", "anyOf", "oneOf", "allOf", "title", "const"):
            if key in node:
                problems.append(f"{path}: {key} left in the schema")
        if "properties" in node and "additionalProperties" in node:
            problems.append(f"{path}: both properties and additionalProperties")
        if node.get("additionalProperties") in (True, False):
            problems.append(f"{path}: boolean additionalProperties")
        if node.get("default", "") is None:
            problems.append(f"{path}: null default")
    return problems


def test_committed_crds_match_the_models() -> None:
    expected = rendered()
    for name, text in expected.items():
        path = CRDS / name
        assert path.exists(), f"crds/{name} is missing; {FIX}"
        assert path.read_text(encoding="utf-8") == text, f"crds/{name} is out of date; {FIX}"
    extra = sorted(
        p.name for p in CRDS.glob("*.yaml") if p.name not in expected and p.name not in NOT_GENERATED
    )
    assert not extra, f"crds/ holds files no model generates: {extra}; add the model to CRD_MODELS and {FIX}"


@pytest.mark.parametrize("model", CRD_MODELS, ids=lambda m: m.__name__)
def test_every_generated_crd_is_structural(model: type[CustomResource]) -> None:
    schema = crd_for(model)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert structural_problems(schema) == []
    assert "$ref" not in yaml.safe_dump(schema)


PROJECT_CRDS = (*CRD_MODELS, GpuFault)  # the driver's CRDs and the simulator's (served by `gpudra up` only)


@pytest.mark.parametrize("model", PROJECT_CRDS, ids=lambda m: m.__name__)
def test_every_crd_has_short_names_a_category_and_printer_columns(model: type[CustomResource]) -> None:
    crd = crd_for(model)
    assert crd["spec"]["names"].get("shortNames"), "kubectl get <short name>"
    assert "gpudra" in crd["spec"]["names"].get("categories", []), "kubectl get gpudra"
    columns = crd["spec"]["versions"][0].get("additionalPrinterColumns") or []
    assert "Age" in [c["name"] for c in columns]
    assert all("[*]" not in c["jsonPath"] for c in columns), "a column shows one value; a list needs -o yaml"


@pytest.mark.parametrize("model", PROJECT_CRDS, ids=lambda m: m.__name__)
def test_every_field_below_the_top_has_a_description_for_kubectl_explain(model: type[CustomResource]) -> None:
    schema = openapi_schema(model)
    # map values ("{}") and list items ("[]") of plain strings are described by their map or list field
    missing = [
        path
        for path, node in walk(schema)
        if path.count(".") >= 1
        and "description" not in node
        and not (path.endswith(("{}", "[]")) and node.get("type") != "object")
    ]
    assert missing in ([], [".metadata"])


def test_every_committed_file_is_one_crd_named_after_its_resource() -> None:
    for name, text in rendered().items():
        (crd,) = [doc for doc in yaml.safe_load_all(text) if doc]
        group, plural = name.removesuffix(".yaml").split("_")
        assert crd["metadata"]["name"] == f"{plural}.{group}"
        assert crd["kind"] == "CustomResourceDefinition"


def test_the_writer_reports_drift_and_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--out", str(tmp_path), "--check"]) == 1
    assert "differ" in capsys.readouterr().out
    assert main(["--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(rendered())
    assert main(["--out", str(tmp_path), "--check"]) == 0


# ---------------------------------------------------------------- shapes, on a toy model


class Leaf(WireModel):
    """A leaf."""

    size_limit: int = Field(default=1, gt=0, le=10, description="How big.")


class Toy(CustomResource):
    """A toy resource."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        group="gpudra.dev", version="v1alpha1", kind="Toy", plural="toys", singular="toy", scope="Cluster"
    )

    api_version: str = "gpudra.dev/v1alpha1"
    kind: str = "Toy"
    leaf: Leaf | None = Field(default=None, description="Overrides the leaf's own description.")
    labels: dict[str, str] | None = None
    free: dict[str, Any] | None = None
    anything: Any = None
    port: int | str | None = None
    leaves: list[Leaf] = Field(default_factory=list)


def test_toy_schema_shapes() -> None:
    properties = openapi_schema(Toy)["properties"]
    assert properties["leaf"] == {
        "description": "Overrides the leaf's own description.",
        "properties": {
            "sizeLimit": {
                "default": 1,
                "description": "How big.",
                "exclusiveMinimum": True,
                "maximum": 10,
                "minimum": 0,
                "type": "integer",
            }
        },
        "type": "object",
    }
    assert properties["labels"] == {"type": "object", "additionalProperties": {"type": "string"}}
    assert properties["free"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert properties["anything"] == {"x-kubernetes-preserve-unknown-fields": True}
    assert properties["port"] == {"x-kubernetes-int-or-string": True}
    assert properties["leaves"]["items"]["description"] == "A leaf."
    crd = crd_for(Toy)
    assert crd["spec"]["scope"] == "Cluster"
    assert "subresources" not in crd["spec"]["versions"][0]


class Tree(WireModel):
    children: list[Tree] | None = None


class Forest(Toy):
    tree: Tree | None = None


class Mixed(Toy):
    either: Leaf | str | None = None


def test_recursive_models_are_refused() -> None:
    with pytest.raises(CrdGenerationError, match="refers back to Tree"):
        openapi_schema(Forest)


def test_unions_of_shapes_are_refused_with_the_fix() -> None:
    with pytest.raises(CrdGenerationError, match=r"Mixed: Toy\.either is a union"):
        openapi_schema(Mixed)
