"""kubectl as users expect it, on the real kube-apiserver: `kubectl explain` describes every field of the project's
CRDs (from the models' descriptions), their short names and columns work, and the kubectl-gpudra plugin reads the
cluster as kubectl does (its kubeconfig: client certificates, not a bare URL)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from _realkit import StartKubernetes

from clusterkit import kubectl
from gpudra.api.crdgen import CRD_MODELS, openapi_schema

BIN = Path(sys.executable).parent  # the project's entry points, kubectl-gpudra among them


def fields(schema: dict[str, Any], path: str = "") -> list[tuple[str, str]]:
    """(dotted path, description) of every field under ``schema`` (list items are walked through, as kubectl
    explain does)."""
    out = []
    for name, sub in (schema.get("properties") or {}).items():
        here = f"{path}.{name}" if path else name
        if "description" in sub:
            out.append((here, sub["description"]))
        out += fields(sub.get("items", sub), here)
    return out


def first_words(text: str) -> str:
    """The description's first words, as kubectl wraps them onto its first line."""
    return " ".join(text.split()[:4])


async def test_kubectl_explain_describes_every_field_of_the_crds(start_kubernetes: StartKubernetes) -> None:
    cluster = await start_kubernetes("l4x4:1")
    for model in CRD_MODELS:
        plural = model.crd.plural
        described = [(p, d) for p, d in fields(openapi_schema(model)) if p not in ("apiVersion", "kind")]
        assert described, plural
        # one `kubectl explain --recursive` per object is a field list; the descriptions are checked per parent
        parents = sorted({p.rpartition(".")[0] for p, _ in described})
        for parent in parents:
            text = " ".join(
                (await kubectl(cluster, "explain", f"{plural}.{parent}" if parent else plural)).split()
            )
            for path, description in described:
                if path.rpartition(".")[0] == parent:
                    assert first_words(description) in text, f"kubectl explain {plural}.{path}"


async def test_short_names_columns_and_the_plugin(
    start_kubernetes: StartKubernetes, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = await start_kubernetes("l4x4:1")
    resources = await kubectl(cluster, "api-resources", "--api-group=resource.nvidia.com")
    assert re.search(r"^computedomains\s+cd\s", resources, re.M)
    assert re.search(r"^computedomaincliques\s+cdclique\s", resources, re.M)
    assert "mlay" in await kubectl(cluster, "api-resources", "--api-group=gpudra.dev")
    assert "No resources found" in await kubectl(cluster, "get", "cd,cdclique,mlay", "-A")
    monkeypatch.setenv("PATH", f"{BIN}:{os.environ['PATH']}")  # kubectl finds kubectl-gpudra on PATH
    table = await kubectl(cluster, "gpudra", "status")
    assert "l4x4-0" in table and "4x NVIDIA L4" in table
