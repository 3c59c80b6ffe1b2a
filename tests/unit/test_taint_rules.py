"""DeviceTaintRules as kube-scheduler applies them to slices, and when the device-taint eviction controller evicts."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.allocator.taintrules import claim_eviction, rule_selects, taint_slice
from gpudra.api.dra import DeviceRequestAllocationResult, DeviceTaint, DeviceTaintRule, ResourceSlice

T0 = "2026-01-01T00:00:00Z"
T0_SECONDS = 1767225600.0


def rule(
    selector: dict[str, Any] | None, effect: str = "NoExecute", key: str = "example.com/m"
) -> DeviceTaintRule:
    spec: dict[str, Any] = {"taint": {"key": key, "effect": effect, "timeAdded": T0}}
    if selector is not None:
        spec["deviceSelector"] = selector
    return DeviceTaintRule.model_validate({"metadata": {"name": "r"}, "spec": spec})


@pytest.mark.parametrize(
    ("selector", "selected"),
    [
        (None, False),  # no selector: nothing
        ({}, True),  # the empty selector: everything
        ({"driver": "gpu.nvidia.com"}, True),
        ({"driver": "other.example.com"}, False),
        ({"driver": "gpu.nvidia.com", "pool": "node-a", "device": "gpu-0"}, True),
        ({"pool": "node-a", "device": "gpu-1"}, False),
        ({"deviceClassName": "gpu.nvidia.com"}, False),  # 1.34's alpha field: not evaluated, selects nothing
    ],
)
def test_which_devices_a_rule_selects(selector: dict[str, Any] | None, selected: bool) -> None:
    assert rule_selects(rule(selector), "gpu.nvidia.com", "node-a", "gpu-0") is selected


def test_a_slice_gets_the_taints_of_the_rules_selecting_its_devices_after_its_own() -> None:
    own = {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}
    slice_ = ResourceSlice.model_validate(
        {
            "metadata": {"name": "s"},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": "node-a",
                "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0", "taints": [own]}, {"name": "gpu-1"}],
            },
        }
    )
    tainted = taint_slice(slice_, [rule({"device": "gpu-0"}), rule({"pool": "node-b"})])
    assert [[t.key for t in d.taints or ()] for d in tainted.spec.devices or ()] == [
        ["gpu.nvidia.com/xid", "example.com/m"],
        [],
    ]
    assert taint_slice(slice_, [rule({"driver": "other.example.com"})]) is slice_


def result(tolerations: list[dict[str, Any]] | None = None) -> DeviceRequestAllocationResult:
    return DeviceRequestAllocationResult.model_validate(
        {
            "request": "r",
            "driver": "gpu.nvidia.com",
            "pool": "node-a",
            "device": "gpu-0",
            "tolerations": tolerations,
        }
    )


def published(effect: str) -> Any:
    taint = DeviceTaint(key="gpu.nvidia.com/xid", value="79", effect=effect, time_added=T0)
    return lambda driver, pool, device: [taint] if device == "gpu-0" else []


def test_an_untolerated_noexecute_taint_evicts_at_once_noschedule_never() -> None:
    eviction = claim_eviction([result()], published("NoExecute"), [])
    assert eviction is not None and eviction.at == T0_SECONDS
    assert eviction.taints == ("gpu.nvidia.com/xid=79:NoExecute",)
    assert claim_eviction([result()], published("NoSchedule"), [rule({}, effect="NoSchedule")]) is None


@pytest.mark.parametrize(
    ("tolerations", "delay"),
    [
        ([{"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoExecute"}], None),  # for good
        ([{"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}], 30.0),
        (
            [
                {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
                {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
            ],
            30.0,  # the shortest limit wins
        ),
        ([{"operator": "Exists"}], 0.0),  # no effect given: the eviction controller does not count it
        ([{"key": "other", "operator": "Exists", "effect": "NoExecute"}], 0.0),
    ],
)
def test_noexecute_tolerations_delay_or_prevent_eviction(
    tolerations: list[dict[str, Any]], delay: float | None
) -> None:
    eviction = claim_eviction([result(tolerations)], published("NoExecute"), [])
    assert (None if eviction is None else eviction.at - T0_SECONDS) == delay


def test_a_rule_evicts_the_devices_it_selects() -> None:
    none: Any = lambda driver, pool, device: []  # noqa: E731
    eviction = claim_eviction([result()], none, [rule({"pool": "node-a"})])
    assert eviction is not None and eviction.taints == ("example.com/m=:NoExecute",)
    assert claim_eviction([result()], none, [rule({"pool": "node-b"})]) is None
