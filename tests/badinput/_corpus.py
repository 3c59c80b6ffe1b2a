"""The bad-input corpus: its manifests and what a real kube-apiserver answered to each, by minor version
(``real-v1.<minor>.yaml``: v1.34.4 and v1.37.2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
RECORDS: dict[int, dict[str, Any]] = {
    int(path.stem.rsplit(".", 1)[1]): yaml.safe_load(path.read_text()) for path in HERE.glob("real-v1.*.yaml")
}
REAL: dict[str, Any] = RECORDS[max(RECORDS)]
"""The newest record: what the embedded server, emulating that version by default, must answer."""
REFUSED = sorted(name for name, record in REAL["records"].items() if record["exit"])
ACCEPTED = sorted(name for name, record in REAL["records"].items() if not record["exit"])
VALID = {"class-selector-cost-at-limit"}
"""Accepted cases that are valid, not merely unknowable to the API server: an edge just inside a limit. No
controller warns about them (the other accepted cases each get a Warning Event: test_events.py)."""
CEL_WORDING = {"claim-selector-undeclared"}
"""Cases whose message is a CEL type-checker error: cel-go and cel-cpp word those differently."""
ISSUE_CASES = [
    "claim-selector-syntax",
    "claim-unknown-field",
    "claim-count-string",
    "claim-no-device-class",
    "computedomain-numnodes-negative",
    "slice-string-attribute-bool",
]
PLURALS = {
    "ResourceClaim": "resourceclaims",
    "ResourceClaimTemplate": "resourceclaimtemplates",
    "DeviceClass": "deviceclasses",
    "ResourceSlice": "resourceslices",
    "ComputeDomain": "computedomains",
    "MigLayout": "miglayouts",
    "ComputeDomainClique": "computedomaincliques",
}
NAMESPACED = {"ResourceClaim", "ResourceClaimTemplate", "ComputeDomain", "ComputeDomainClique"}


def manifest(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((HERE / f"{name}.yaml").read_text())
    return document


def collection_url(obj: dict[str, Any]) -> str:
    group_version = obj["apiVersion"]
    namespace = "/namespaces/default" if obj["kind"] in NAMESPACED else ""
    return f"/apis/{group_version}{namespace}/{PLURALS[obj['kind']]}"
