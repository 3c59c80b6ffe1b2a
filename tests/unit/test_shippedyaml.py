"""The YAML gpudra ships reads the same through libyaml's safe loader (what gpudra uses, for speed) as through
PyYAML's own."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpudra import shippedyaml

OPERATOR = Path(__file__).parents[2] / "operator" / "gpudra"
MANIFESTS = Path(__file__).parents[2] / "manifests" / "base"
SHIPPED = sorted([*OPERATOR.rglob("*.yaml"), *MANIFESTS.glob("*.yaml")])


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_yaml_file_reads_the_same_through_both_loaders(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert list(shippedyaml.load_all(text)) == list(yaml.safe_load_all(text))


def test_the_catalog_and_the_profiles_are_among_them() -> None:
    assert {"catalog.yaml", "profiles.yaml"} <= {p.name for p in SHIPPED}
