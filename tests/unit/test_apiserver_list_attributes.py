"""The embedded API server and list-typed attributes: kept and validated with DRAListTypeAttributes on, dropped
on write with it off (kube-apiserver's ResourceSlice strategy), so an attribute holding only a list is refused
with the error and field path kube-apiserver gives."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpudra.cluster.apiserver.registry import Registry
from gpudra.cluster.apiserver.status import APIStatusError
from gpudra.cluster.apiserver.validation import Admission
from gpudra.cluster.apiserver.validation.admission import Admitter
from gpudra.cluster.apiserver.versions import KubeVersion

GATE = frozenset({"DRAListTypeAttributes"})


def slice_(attributes: dict[str, Any], devices: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "n1-gpu"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "n1",
            "pool": {"name": "n1", "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}", "attributes": attributes} for i in range(devices)],
        },
    }


def admit(obj: dict[str, Any], gates: frozenset[str], old: dict[str, Any] | None = None) -> dict[str, Any]:
    rt = Registry().get("resource.k8s.io", "v1", "resourceslices")
    assert rt is not None
    return Admitter(KubeVersion(37, gates)).admit(rt, obj, old, Admission())


def refusal(obj: dict[str, Any], gates: frozenset[str]) -> list[str]:
    with pytest.raises(APIStatusError) as caught:
        admit(obj, gates)
    return [f"{c['field']}: {c['message']}" for c in caught.value.details["causes"]]


PEERS = "gpudra.dev/nvlinkPeers"


def test_with_the_gate_on_lists_are_kept() -> None:
    stored = admit(slice_({PEERS: {"strings": ["GPU-a", "GPU-b"]}, "numa": {"ints": [0]}}), GATE)
    assert stored["spec"]["devices"][0]["attributes"][PEERS] == {"strings": ["GPU-a", "GPU-b"]}


def test_with_the_gate_off_a_list_only_attribute_is_refused_where_kube_apiserver_refuses_it() -> None:
    causes = refusal(slice_({PEERS: {"strings": ["GPU-a"]}, "type": {"string": "gpu"}}), frozenset())
    assert len(causes) == 1 and causes[0].startswith(f"spec.devices[0].attributes[{PEERS}]")
    assert causes[0].endswith(
        'Invalid value: "": must specify one of: `int`, `bool`, `string`, `version`, `ints`, `bools`, `strings`, '
        "`versions`"
    )  # kube-apiserver 1.37.2's words


@pytest.mark.parametrize(
    ("attributes", "devices", "expect"),
    [
        ({PEERS: {"strings": []}}, 1, f"spec.devices[0].attributes[{PEERS}].strings"),
        ({PEERS: {"strings": ["x" * 65]}}, 1, f"spec.devices[0].attributes[{PEERS}].strings[0]"),
        ({"v": {"versions": ["1.0.0", "01.2"]}}, 1, "spec.devices[0].attributes[v].versions[1]"),
        ({"v": {"ints": [1], "int": 1}}, 1, "spec.devices[0].attributes[v]"),
        ({"many": {"ints": list(range(49))}}, 1, "spec.devices[0]"),
        ({PEERS: {"strings": ["a"]}}, 65, "spec.devices"),
    ],
)
def test_list_limits(attributes: dict[str, Any], devices: int, expect: str) -> None:
    causes = refusal(slice_(attributes, devices), GATE)
    assert any(c.startswith(f"{expect}: ") for c in causes), causes


# ---- includes() in selectors: kube-apiserver's "new expressions" CEL environment has it only with the gate on --
INCLUDES = 'device.attributes["gpudra.dev"].nvlinkPeers.includes("GPU-a")'
INCLUDES_PATH = "spec.devices.requests[0].exactly.selectors[0].cel.expression"


def claim(expression: str = INCLUDES, *, first_available: bool = False) -> dict[str, Any]:
    exact = {"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {"expression": expression}}]}
    request = {
        "name": "gpus",
        **({"firstAvailable": [{"name": "any", **exact}]} if first_available else {"exactly": exact}),
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "linked", "namespace": "default"},
        "spec": {"devices": {"requests": [request]}},
    }


def template() -> dict[str, Any]:
    inner = claim()
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "linked", "namespace": "default"},
        "spec": {"spec": inner["spec"]},
    }


def device_class(*expressions: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "linked.gpudra.dev"},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
    }


def write(
    plural: str, obj: dict[str, Any], gates: frozenset[str], old: dict[str, Any] | None = None
) -> dict[str, Any]:
    rt = Registry().get("resource.k8s.io", "v1", plural)
    assert rt is not None
    return Admitter(KubeVersion(37, gates)).admit(rt, obj, old, Admission())


def refused(
    plural: str, obj: dict[str, Any], gates: frozenset[str], old: dict[str, Any] | None = None
) -> list[Any]:
    with pytest.raises(APIStatusError) as caught:
        write(plural, obj, gates, old)
    causes: list[Any] = caught.value.details["causes"]
    return causes


def test_with_the_gate_off_a_new_claim_using_includes_is_refused_as_kube_apiserver_refuses_it() -> None:
    (cause,) = refused("resourceclaims", claim(), frozenset())
    assert cause["field"] == INCLUDES_PATH
    column = INCLUDES.index("(") + 1  # cel-go and cel-cpp put a call's error at its opening parenthesis
    assert cause["message"].startswith(
        f"Invalid value: {json.dumps(INCLUDES)}: compilation failed: ERROR: <input>:1:{column}: "
        "undeclared reference to 'includes' (in container '')"
    )
    assert "DRAListTypeAttributes" in cause["message"]  # gpudra's hint says what would make it compile
    assert cause["message"].endswith(f"\n | {INCLUDES}\n | {'.' * (column - 1)}^")


@pytest.mark.parametrize(
    ("plural", "obj", "path"),
    [
        (
            "resourceclaims",
            claim(first_available=True),
            "spec.devices.requests[0].firstAvailable[0].selectors[0].cel.expression",
        ),
        ("resourceclaimtemplates", template(), f"spec.{INCLUDES_PATH}"),
        (
            "deviceclasses",
            device_class('device.driver == "gpu.nvidia.com"', INCLUDES),
            "spec.selectors[1].cel.expression",
        ),
    ],
)
def test_with_the_gate_off_includes_is_refused_in_every_new_selector(
    plural: str, obj: dict[str, Any], path: str
) -> None:
    causes = refused(plural, obj, frozenset())
    assert [c["field"] for c in causes] == [path]
    assert "undeclared reference to 'includes'" in causes[0]["message"]
    write(plural, obj, GATE)  # accepted with the gate on


def test_with_the_gate_on_new_objects_may_use_includes() -> None:
    stored = write("resourceclaims", claim(), GATE)
    assert (
        stored["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]["expression"] == INCLUDES
    )
    write("resourceclaimtemplates", template(), GATE)
    write("deviceclasses", device_class(INCLUDES), GATE)


def test_other_compile_errors_are_reported_as_before_with_the_gate_off() -> None:
    (cause,) = refused("resourceclaims", claim('device.attributes["gpudra.dev"].uuid == 1 +'), frozenset())
    assert cause["field"] == INCLUDES_PATH and "Syntax error" in cause["message"]


def test_objects_stored_with_the_gate_on_stay_updatable_after_it_is_turned_off() -> None:
    """kube-apiserver does not compile a stored claim's or template's selectors again (the spec is immutable), nor
    a DeviceClass's when its selectors are as stored; any change to them compiles them all as new."""
    old_claim = write("resourceclaims", claim(), GATE)
    labelled = {**old_claim, "metadata": {**old_claim["metadata"], "labels": {"team": "a"}}}
    assert write("resourceclaims", labelled, frozenset(), old_claim)["metadata"]["labels"] == {"team": "a"}

    old_template = write("resourceclaimtemplates", template(), GATE)
    labelled = {**old_template, "metadata": {**old_template["metadata"], "labels": {"team": "a"}}}
    write("resourceclaimtemplates", labelled, frozenset(), old_template)

    other = 'device.driver == "gpu.nvidia.com"'
    old_class = write("deviceclasses", device_class(other, INCLUDES), GATE)
    labelled = {**old_class, "metadata": {**old_class["metadata"], "labels": {"team": "a"}}}
    write("deviceclasses", labelled, frozenset(), old_class)
    reordered = {**old_class, "spec": device_class(INCLUDES, other)["spec"]}
    causes = refused("deviceclasses", reordered, frozenset(), old_class)
    assert [c["field"] for c in causes] == ["spec.selectors[0].cel.expression"]
