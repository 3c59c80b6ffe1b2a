"""Pure prepare decisions: device-node minors, conflicts, sharing actions, status merging."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.agent.checkpoint import ClaimEntry, DeviceRecord, MigInstanceRecord
from gpudra.agent.health import DeviceProblem
from gpudra.agent.prepareplan import (
    conflicts,
    device_status,
    merge_device_statuses,
    mig_cap_minors,
    recorded_only_its_spec,
    sharing_actions,
)


@pytest.mark.parametrize(
    ("parent", "gi", "ci", "expected"),
    [(0, 0, 0, (3, 4)), (0, 1, 0, (12, 13)), (1, 0, 0, (138, 139)), (0, 2, 3, (21, 25))],
)
def test_mig_cap_minors_follow_nvidia_caps_layout(
    parent: int, gi: int, ci: int, expected: tuple[int, int]
) -> None:
    assert mig_cap_minors(parent, gi, ci) == expected


@pytest.mark.parametrize(
    ("holders", "shareable", "expected"),
    [
        ({}, frozenset(), []),
        ({"me": [("n", "gpu-0")]}, frozenset(), []),
        ({"other": [("n", "gpu-0")]}, frozenset(), ["device gpu-0 is already prepared for claim other"]),
        ({"other": [("n", "gpu-0")]}, frozenset({"gpu-0"}), []),
        ({"other": [("m", "gpu-0")]}, frozenset(), []),
    ],
)
def test_conflicts(holders: dict[str, Any], shareable: frozenset[str], expected: list[str]) -> None:
    assert conflicts("me", [("n", "gpu-0")], holders, shareable=shareable) == expected


def _gpu(name: str, kind: str = "gpu") -> DeviceRecord:
    return DeviceRecord(pool_name="n", device_name=name, uuid=f"U-{name}", device_type=kind)


@pytest.mark.parametrize(
    ("device", "sharing", "expected"),
    [
        (_gpu("gpu-0"), {"strategy": "MPS"}, [("U-gpu-0", True, None)]),
        (
            _gpu("gpu-0"),
            {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Medium"}},
            [("U-gpu-0", False, 2)],
        ),
        (_gpu("gpu-0"), {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}}, []),
        (_gpu("gpu-0-mig-1g10gb-19-0", "mig"), {"strategy": "MPS"}, []),
    ],
)
def test_sharing_actions(
    device: DeviceRecord, sharing: dict[str, Any], expected: list[tuple[Any, ...]]
) -> None:
    kind = "GpuConfig" if device.device_type == "gpu" else "MigDeviceConfig"
    actions = sharing_actions([device], {device.device_name: {"kind": kind, "sharing": sharing}})
    assert [(a.gpu_uuid, a.exclusive_process, a.time_slice) for a in actions] == expected


def test_merge_keeps_others_and_transition_time_of_unchanged_condition() -> None:
    other = {"driver": "x.example.com", "pool": "n", "device": "d"}
    old = device_status("gpu.nvidia.com", "n", "gpu-0", ready=True, reason="Prepared", message="", now="T1")
    new = device_status("gpu.nvidia.com", "n", "gpu-0", ready=True, reason="Prepared", message="", now="T2")
    merged = merge_device_statuses([other, old], driver="gpu.nvidia.com", pool="n", ours=[new])
    assert merged[0] == other
    assert merged[1]["conditions"][0]["lastTransitionTime"] == "T1"
    assert merge_device_statuses(merged, driver="gpu.nvidia.com", pool="n", ours=[]) == [other]


def test_health_condition_flips_and_keeps_ready_transition_time() -> None:
    problem = DeviceProblem("Xid79", "XID 79 reported for gpu-0")
    old = device_status(
        "gpu.nvidia.com", "n", "gpu-0", ready=True, reason="Prepared", message="", now="T1", health="Healthy"
    )
    sick = device_status(
        "gpu.nvidia.com", "n", "gpu-0", ready=True, reason="Prepared", message="", now="T2", health=problem
    )
    (merged,) = merge_device_statuses([old], driver="gpu.nvidia.com", pool="n", ours=[sick])
    ready, healthy = merged["conditions"]
    assert (ready["type"], ready["lastTransitionTime"]) == ("Ready", "T1")
    assert (healthy["type"], healthy["status"], healthy["reason"]) == ("Healthy", "False", "Xid79")
    assert healthy["lastTransitionTime"] == "T2"


SPEC_DEVICE: dict[str, Any] = {
    "name": "u-gpu-0",
    "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]},
}


@pytest.mark.parametrize(
    ("change", "only_its_spec"),
    [
        ({}, True),
        ({"state": "PrepareStarted"}, False),
        ({"cdi_document": None}, False),
        ({"mig_instances_created": [MigInstanceRecord(parent_uuid="GPU-0", profile="1g.10gb", placement_start=0)]},
         False),
        ({"configs": {"gpu-0": {"kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing",
                                                                 "timeSlicingConfig": {"interval": "Long"}}}}},
         False),
        (
            {"cdi_document": {"kind": "k8s.gpu.nvidia.com/claim", "devices": [
                SPEC_DEVICE,
                {"name": "u-metadata", "containerEdits": {"mounts": [{"hostPath": "/m", "containerPath": "/m"}]}},
            ]}},
            False,
        ),
    ],
)  # fmt: skip
def test_which_prepared_claims_changed_nothing_but_their_spec(
    change: dict[str, Any], only_its_spec: bool
) -> None:
    """Such a claim is unprepared with one checkpoint write; any other change needs the UnprepareStarted record."""
    entry = ClaimEntry(
        namespace="a", name="c", state="PrepareCompleted",
        devices=[DeviceRecord(pool_name="n", device_name="gpu-0", uuid="GPU-0", device_type="gpu")],
        cdi_document={"kind": "k8s.gpu.nvidia.com/claim", "devices": [SPEC_DEVICE]},
    )  # fmt: skip
    assert recorded_only_its_spec(entry.model_copy(update=change)) is only_its_spec
