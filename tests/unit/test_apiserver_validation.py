"""The embedded API server's validation, piece by piece (the corpus in tests/badinput holds it to kube-apiserver)."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.cluster.apiserver.status import APIStatusError
from gpudra.cluster.apiserver.validation import Admission
from gpudra.cluster.apiserver.validation.customresources import NOT_CHECKED, check, prune
from gpudra.cluster.apiserver.validation.decoding import decode
from gpudra.cluster.apiserver.validation.gotypes import GoType, schemas_for
from gpudra.cluster.apiserver.validation.resourceslices import taint_rule
from gpudra.cluster.apiserver.versions import KubeVersion

CLAIM = schemas_for(34).kind("resource.k8s.io", "v1", "ResourceClaim")
SLICE = schemas_for(34).kind("resource.k8s.io", "v1", "ResourceSlice")


def claim(**exactly: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "c"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (claim(count=2.5), "json: cannot unmarshal number 2.5 into Go struct field "
                           "ExactDeviceRequest.spec.devices.requests.exactly.count of type int64"),
        ({**claim(count="x"), "metadata": {"name": "c", "labels": {"a": 1}}},  # the first in document order
         "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string"),
        ({"metadata": {"name": "c"}, "spec": {"devices": {"requests": {"name": "gpu"}}}},
         "json: cannot unmarshal object into Go struct field DeviceClaim.spec.devices.requests of type "
         "[]v1.DeviceRequest"),
    ],
)  # fmt: skip
def test_the_first_type_error_is_the_one_go_reports(body: dict[str, Any], error: str) -> None:
    assert CLAIM is not None
    assert decode(body, CLAIM).type_error == error


def test_unknown_fields_are_listed_with_kubernetes_paths_and_dropped() -> None:
    assert SLICE is not None
    typo = {"name": "a", "attributes": {"x": {"strin": "v"}}, "bogus": True}
    body = {"metadata": {"name": "s", "foo": 1}, "spec": {"driver": "d", "devices": [typo]}}
    decoded = decode(body, SLICE)
    assert decoded.unknown == ["metadata.foo", "spec.devices[0].attributes.x.strin", "spec.devices[0].bogus"]
    assert decoded.value == {
        "metadata": {"name": "s"},
        "spec": {"driver": "d", "devices": [{"name": "a", "attributes": {"x": {}}}]},
    }


@pytest.mark.parametrize(
    ("mode", "warnings", "refused"),
    [("Strict", [], True), ("Warn", ['unknown field "a.b"'], False), ("Ignore", [], False)],
)
def test_field_validation_modes(mode: str, warnings: list[str], refused: bool) -> None:
    admission = Admission(mode)
    if refused:
        with pytest.raises(APIStatusError) as error:
            admission.unknown_fields("Pod", "v1", ["a.b"])
        assert error.value.status == 400
        assert (
            error.value.message
            == 'Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field "a.b"'
        )
    else:
        admission.unknown_fields("Pod", "v1", ["a.b"])
    assert admission.warnings == warnings


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["size"],
            "properties": {
                "size": {"type": "integer", "minimum": 1, "maximum": 8},
                "mode": {"type": "string", "enum": ["A", "B"]},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "my-name": {"type": "string", "maxLength": 3},
            },
            "x-kubernetes-validations": [
                {"rule": "self == oldSelf", "message": "spec is immutable"},
                {"rule": "!has(self.my__dash__name) || self.size > 1", "message": "a name needs size > 1"},
            ],
        }
    },
}


def test_pruning_keeps_what_the_schema_declares_or_preserves() -> None:
    unknown: list[str] = []
    body = {"spec": {"size": 1, "free": {"anything": [1]}, "extra": 2, "mode": None}, "status": {}}
    assert prune(body, SCHEMA, "", unknown) == {"spec": {"size": 1, "free": {"anything": [1]}}}
    assert unknown == ["spec.extra", "status"]


@pytest.mark.parametrize(
    ("spec", "old", "errors"),
    [
        ({"size": 2, "my-name": "ab"}, None, []),
        ({"size": 1, "my-name": "ab"}, None, ["spec: Invalid value: \"object\": a name needs size > 1"]),
        ({"size": 9}, None, ["spec.size: Invalid value: 9: spec.size in body should be less than or equal to 8"]),
        ({"size": 2}, {"size": 3}, ["spec: Invalid value: \"object\": spec is immutable"]),  # a transition rule
        ({"size": "two"}, None, [
            'spec.size: Invalid value: "string": spec.size in body must be of type integer: "string"',
            f"<nil>: Invalid value: null: {NOT_CHECKED}",
        ]),
        ({"mode": "C", "size": 1}, None, ['spec.mode: Unsupported value: "C": supported values: "A", "B"',
                                          f"<nil>: Invalid value: null: {NOT_CHECKED}"]),
        ({}, None, ["spec.size: Required value", f"<nil>: Invalid value: null: {NOT_CHECKED}"]),
    ],
)  # fmt: skip
def test_structural_schema_and_cel_rules(
    spec: dict[str, Any], old: dict[str, Any] | None, errors: list[str]
) -> None:
    assert [str(e) for e in check({"spec": spec}, None if old is None else {"spec": old}, SCHEMA)] == errors


def test_a_type_freed_after_decoding_never_lends_its_decoder_to_a_later_type() -> None:
    """Decoders are cached by a type's identity: a struct type made for one server and freed with it (CPython reuses
    its memory, so its id, for the next object of that size) must not decode a later string field as a struct."""
    for _ in range(50):
        struct = GoType("struct", "unstructured", "", _fields={})
        assert decode({}, struct).type_error == ""
        del struct
        string = GoType("string", "string")
        assert decode("None", string).type_error == ""


NODES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "nodes": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "index": {"type": "integer"}},
                "x-kubernetes-validations": [
                    {"rule": "self.index == oldSelf.index", "message": "index is fixed"}
                ],
            },
        }
    },
}


@pytest.mark.parametrize(
    ("nodes", "old", "errors"),
    [
        # items are paired with their old selves by key, wherever they moved in the list
        ([{"name": "b", "index": 1}, {"name": "a", "index": 0}], [{"name": "a", "index": 0}, {"name": "b", "index": 1}],
         []),
        ([{"name": "b", "index": 1}, {"name": "a", "index": 2}], [{"name": "a", "index": 0}, {"name": "b", "index": 1}],
         ['nodes[1]: Invalid value: "object": index is fixed']),
        # a new item has no old self: its transition rule is not evaluated
        ([{"name": "c", "index": 5}], [{"name": "a", "index": 0}], []),
        # of two old items with one key, the first is the old self
        ([{"name": "a", "index": 0}], [{"name": "a", "index": 0}, {"name": "a", "index": 3}], []),
    ],
)  # fmt: skip
def test_transition_rules_of_list_map_items_pair_items_by_key(
    nodes: list[dict[str, Any]], old: list[dict[str, Any]], errors: list[str]
) -> None:
    assert [str(e) for e in check({"nodes": nodes}, {"nodes": old}, NODES_SCHEMA)] == errors


# What kube-apiserver v1.37.2 answered to `kubectl apply` of a resource.k8s.io/v1 DeviceTaintRule with these
# selectors (recorded by hand: the embedded server serves the rule as v1alpha3, which 1.37 does not serve).
TAINT = {"key": "example.com/broken", "effect": "NoSchedule"}
SUBDOMAIN = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start "
    "and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end "
    "with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


@pytest.mark.parametrize(
    ("selector", "said"),
    [
        (
            {"driver": "Not_A_Domain!"},
            [f'spec.deviceSelector.driver: Invalid value: "Not_A_Domain!": {SUBDOMAIN}'],
        ),
        (
            {"driver": "a" * 64 + ".com"},
            ["spec.deviceSelector.driver: Too long: may not be more than 63 bytes"],
        ),
        (
            {"driver": "gpu.nvidia.com", "pool": "Bad_Pool", "device": "Bad_Dev"},
            [
                f'spec.deviceSelector.pool: Invalid value: "Bad_Pool": {SUBDOMAIN}',
                f'spec.deviceSelector.device: Invalid value: "Bad_Dev": {LABEL}',
            ],
        ),
        ({"driver": "gpu.nvidia.com", "pool": "node-a/gpus", "device": "gpu-0"}, []),
    ],
)
def test_a_device_taint_rule_selects_by_valid_names(selector: dict[str, str], said: list[str]) -> None:
    errors = taint_rule({"deviceSelector": selector, "taint": TAINT}, KubeVersion(37))
    assert [str(e) for e in errors] == said
