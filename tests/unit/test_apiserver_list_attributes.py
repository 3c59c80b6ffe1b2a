"""The embedded API server and list-typed attributes: kept and validated with DRAListTypeAttributes on, dropped
on write with it off (kube-apiserver's ResourceSlice strategy), so an attribute holding only a list is refused
with the error and field path kube-apiserver gives."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.cluster.apiserver.registry import Registry
from gpudra.cluster.apiserver.status import APIStatusError
from gpudra.cluster.apiserver.validation import Admission
from gpudra.cluster.apiserver.validation.admission import Admitter

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
    return Admitter(37, gates).admit(rt, obj, old, Admission())


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
    assert "exactly one value must be specified" in causes[0]


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
