"""ComputeDomain / ComputeDomainClique: NVIDIA's manifests parse, and the CRD has NVIDIA's schema rules."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from gpudra.api.computedomain import (
    ComputeDomain,
    ComputeDomainClique,
    ComputeDomainNode,
    ComputeDomainStatus,
)
from gpudra.api.crdgen import crd_for

NVIDIA_EXAMPLE = """
apiVersion: resource.nvidia.com/v1beta1
kind: ComputeDomain
metadata:
  name: imex-channel-injection
spec:
  numNodes: 1
  channel:
    resourceClaimTemplate:
      name: imex-channel-0
"""


def at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for part in path.split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


@pytest.fixture(scope="module")
def cd_crd() -> dict[str, Any]:
    return crd_for(ComputeDomain)


def test_nvidias_example_parses_with_defaults_filled_in() -> None:
    cd = ComputeDomain.from_wire(yaml.safe_load(NVIDIA_EXAMPLE))
    assert cd.spec.num_nodes == 1
    assert cd.spec.channel.resource_claim_template.name == "imex-channel-0"
    assert cd.spec.channel.allocation_mode == "Single"
    assert cd.to_wire()["spec"] == {
        "numNodes": 1,
        "channel": {"resourceClaimTemplate": {"name": "imex-channel-0"}, "allocationMode": "Single"},
    }


def test_an_unknown_allocation_mode_is_refused() -> None:
    body = yaml.safe_load(NVIDIA_EXAMPLE)
    body["spec"]["channel"]["allocationMode"] = "Many"
    with pytest.raises(ValidationError):
        ComputeDomain.from_wire(body)


def test_status_nodes_use_nvidias_field_names() -> None:
    status = ComputeDomainStatus(
        status="Ready",
        nodes=[
            ComputeDomainNode(name="n1", ip_address="10.0.0.1", clique_id="uuid.1", index=0, status="Ready")
        ],
    )
    wire = status.to_wire()
    assert wire == {
        "status": "Ready",
        "nodes": [
            {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "uuid.1", "index": 0, "status": "Ready"}
        ],
    }
    assert ComputeDomainStatus.from_wire(wire) == status


def test_clique_round_trips_with_daemons_at_the_top_level() -> None:
    body = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainClique",
        "metadata": {"name": "cd-uid.clique", "namespace": "nvidia-dra-driver-gpu"},
        "daemons": [
            {"nodeName": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 3, "status": "Ready"}
        ],
    }
    clique = ComputeDomainClique.from_wire(body)
    assert clique.daemons is not None
    assert clique.daemons[0].index == 3
    assert clique.to_wire() == body


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("spec", {"required": ["channel"], "x-kubernetes-validations": [
            {"message": "A computeDomain.spec is immutable", "rule": "self == oldSelf"}]}),
        ("spec.numNodes", {"type": "integer", "default": 0, "minimum": 0}),
        ("spec.channel", {"type": "object", "required": ["resourceClaimTemplate"]}),
        ("spec.channel.allocationMode", {"type": "string", "default": "Single", "enum": ["All", "Single"]}),
        ("spec.channel.resourceClaimTemplate", {"type": "object", "required": ["name"]}),
        ("spec.channel.resourceClaimTemplate.name", {"type": "string"}),
        ("status", {"type": "object", "required": ["status"]}),
        ("status.status", {"type": "string", "default": "NotReady", "enum": ["Ready", "NotReady"]}),
        ("status.nodes", {"type": "array", "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["name"]}),
        ("status.nodes.[]", {"type": "object", "required": ["name", "ipAddress", "cliqueID"]}),
        ("status.nodes.[].index", {"type": "integer"}),
        ("status.conditions", {"type": "array", "x-kubernetes-list-type": "map",
                               "x-kubernetes-list-map-keys": ["type"]}),
        ("status.nodes.[].status", {"type": "string", "default": "NotReady", "enum": ["Ready", "NotReady"]}),
    ],
)  # fmt: skip
def test_computedomain_schema_rules_match_nvidias_crd(
    cd_crd: dict[str, Any], path: str, expected: dict[str, Any]
) -> None:
    node = at(cd_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], path)
    assert {key: node.get(key) for key in expected} == expected
    if path == "status.nodes.[].index":
        assert "default" not in node


def test_computedomain_crd_identity(cd_crd: dict[str, Any]) -> None:
    spec = cd_crd["spec"]
    assert cd_crd["metadata"]["name"] == "computedomains.resource.nvidia.com"
    assert (spec["group"], spec["scope"]) == ("resource.nvidia.com", "Namespaced")
    assert spec["names"] == {
        "kind": "ComputeDomain",
        "listKind": "ComputeDomainList",
        "plural": "computedomains",
        "singular": "computedomain",
        "shortNames": ["cd"],
        "categories": ["gpudra"],
    }
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1beta1", True, True)
    assert version["subresources"] == {"status": {}}
    assert [c["jsonPath"] for c in version["additionalPrinterColumns"]] == [
        ".status.status",
        '.status.conditions[?(@.type=="Ready")].reason',
        ".metadata.creationTimestamp",
        ".spec.channel.resourceClaimTemplate.name",  # priority 1: -o wide
    ]
    assert "required" not in version["schema"]["openAPIV3Schema"]


def test_clique_crd_has_a_daemon_map_and_no_status_subresource() -> None:
    crd = crd_for(ComputeDomainClique)
    (version,) = crd["spec"]["versions"]
    assert crd["metadata"]["name"] == "computedomaincliques.resource.nvidia.com"
    assert "subresources" not in version
    daemons = at(version["schema"]["openAPIV3Schema"], "daemons")
    assert daemons["x-kubernetes-list-map-keys"] == ["nodeName"]
    assert daemons["items"]["required"] == ["nodeName", "ipAddress", "cliqueID"]
