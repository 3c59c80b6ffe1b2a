"""The MigLayout CRD: wire shape in mig-parted form, generated schema with validations (the admission rules
evaluated with a CEL engine), columns and names."""

from __future__ import annotations

from typing import Any

import cel_expr_python.cel as cel
import pytest
from pydantic import ValidationError

from gpudra.api.crdgen import crd_for
from gpudra.api.miglayout import MigLayout
from gpudra.mig.migparted import parse_entries

BODY: dict[str, Any] = {
    "apiVersion": "gpudra.dev/v1alpha1",
    "kind": "MigLayout",
    "metadata": {"name": "h100-small"},
    "spec": {
        "nodeSelector": {"matchLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "layout": {
            "entries": [
                {
                    "device-filter": "0x233010DE",
                    "devices": "all",
                    "mig-enabled": True,
                    "mig-devices": {"1g.10gb": 7},
                }
            ]
        },
    },
}


def test_inline_entries_round_trip_in_mig_parted_form() -> None:
    layout = MigLayout.from_wire(BODY)
    assert layout.spec.policy == "Static"
    assert layout.spec.allow_partial is False
    wire = layout.to_wire()
    assert wire["spec"]["layout"]["entries"][0]["mig-devices"] == {"1g.10gb": 7}
    entries = parse_entries(wire["spec"]["layout"]["entries"])
    assert entries[0].counts == {"1g.10gb": 7}
    assert entries[0].device_filter == (0x233010DE,)


def test_unknown_entry_field_is_rejected() -> None:
    body = {
        **BODY,
        "spec": {"layout": {"entries": [{"devices": "all", "mig-enabled": False, "migEnabled": 1}]}},
    }
    with pytest.raises(ValidationError, match="migEnabled"):
        MigLayout.from_wire(body)


def test_crd_names_columns_and_validations() -> None:
    crd = crd_for(MigLayout)
    assert crd["metadata"]["name"] == "miglayouts.gpudra.dev"
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["shortNames"] == ["mlay"]
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha1"
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Policy",
        "Config",
        "Nodes",
        "Applied",
        "Blocked",
        "Invalid",
        "Age",
    ]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    layout = spec["properties"]["layout"]
    rules = [v["rule"] for v in layout["x-kubernetes-validations"]]
    assert "has(self.config) != has(self.entries)" in rules
    assert spec["properties"]["policy"]["enum"] == ["Static", "Dynamic"]
    entry = layout["properties"]["entries"]["items"]
    assert set(entry["properties"]) == {"device-filter", "devices", "mig-enabled", "mig-devices"}
    entry_rules = [v["message"] for v in entry["x-kubernetes-validations"]]
    assert "mig-devices must be empty when mig-enabled is false" in entry_rules
    assert entry["properties"]["mig-devices"]["additionalProperties"] == {
        "type": "integer",
        "minimum": 0,
        "maximum": 7,
    }
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    node = status["nodes"]["items"]["properties"]
    assert node["state"]["enum"] == [
        "pending",
        "applying",
        "success",
        "failed",
        "blocked",
        "invalid",
        "conflict",
    ]


def _descriptions_missing(node: dict[str, Any], path: str) -> list[str]:
    missing = []
    for name, sub in node.get("properties", {}).items():
        if name not in ("apiVersion", "kind", "metadata") and "description" not in sub:
            missing.append(f"{path}.{name}")
        missing += _descriptions_missing(sub, f"{path}.{name}")
    if "items" in node:
        missing += _descriptions_missing(node["items"], f"{path}[]")
    return missing


def test_every_spec_and_status_field_is_explained() -> None:
    schema = crd_for(MigLayout)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    missing = [m for m in _descriptions_missing(schema, "") if ".conditions[]" not in m]
    assert missing == []


def _escaped(value: Any) -> Any:
    """Property names as CRD validation rules see them (Kubernetes escapes '-' as '__dash__')."""
    if isinstance(value, dict):
        return {k.replace("-", "__dash__"): _escaped(v) for k, v in value.items()}
    return value


def _rules_hold(schema: dict[str, Any], value: dict[str, Any]) -> list[str]:
    env = cel.NewEnv(variables={"self": cel.Type.DYN})
    return [
        rule["message"]
        for rule in schema.get("x-kubernetes-validations", [])
        if env.compile(rule["rule"]).eval(env.Activation({"self": _escaped(value)})).value() is not True
    ]


@pytest.mark.parametrize(
    ("entry", "messages"),
    [
        ({"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}, []),
        ({"devices": "all", "mig-enabled": True, "mig-devices": {}}, []),
        ({"devices": "all", "mig-enabled": False}, []),
        (
            {"devices": "all", "mig-enabled": True},
            ["mig-devices is required when mig-enabled is true ({} allowed)"],
        ),
        (
            {"devices": "all", "mig-enabled": False, "mig-devices": {"1g.10gb": 1}},
            ["mig-devices must be empty when mig-enabled is false"],
        ),
    ],
)
def test_entry_admission_rules(entry: dict[str, Any], messages: list[str]) -> None:
    version = crd_for(MigLayout)["spec"]["versions"][0]
    layout = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["layout"]
    assert _rules_hold(layout["properties"]["entries"]["items"], entry) == messages
    assert _rules_hold(layout, {"entries": [entry]}) == []
    assert _rules_hold(layout, {"entries": [entry], "config": "all-balanced"}) == [
        "set exactly one of config or entries"
    ]
