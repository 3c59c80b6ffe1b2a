"""The controller's checks of what the API server accepts but cannot work: missing classes, opaque configs."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.controller.configchecks import problems_of

DRIVERS = ("gpu.nvidia.com", "compute-domain.nvidia.com")
CLASSES = {"gpu.nvidia.com", "mig.nvidia.com"}


def gpu_config(**sharing: Any) -> dict[str, Any]:
    parameters = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": sharing}
    return {"opaque": {"driver": "gpu.nvidia.com", "parameters": parameters}}


def claim(*requests: dict[str, Any], config: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"spec": {"devices": {"requests": list(requests), "config": config or []}}}


def exact(cls: str, name: str = "gpu") -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": cls}}


@pytest.mark.parametrize(
    ("kind", "body", "expected"),
    [
        ("ResourceClaim", claim(exact("gpu.nvidia.com")), []),
        (
            "ResourceClaim",
            claim(exact("gpu.example.com")),
            [("DeviceClassNotFound", "spec.devices.requests[0].exactly.deviceClassName")],
        ),
        (
            "ResourceClaim",
            claim({"name": "r", "firstAvailable": [{"name": "a", "deviceClassName": "mig.nvidia.com"},
                                                    {"name": "b", "deviceClassName": "nope"}]}),
            [("DeviceClassNotFound", "spec.devices.requests[0].firstAvailable[1].deviceClassName")],
        ),
        (
            "ResourceClaim",
            claim(exact("gpu.nvidia.com"), config=[gpu_config(strategy="MPS"), gpu_config(strategy="Shared")]),
            [("InvalidDeviceConfig", "spec.devices.config[1].opaque.parameters")],
        ),
        (  # another driver's parameters are its business
            "ResourceClaim",
            claim(exact("gpu.nvidia.com"), config=[{"opaque": {"driver": "gpu.example.com", "parameters": {"x": 1}}}]),
            [],
        ),
        (  # an allocated claim had its class; its config was already judged
            "ResourceClaim",
            {**claim(exact("gone"), config=[gpu_config(strategy="Shared")]),
             "status": {"allocation": {"devices": {"results": []}}}},
            [],
        ),
        (
            "ResourceClaimTemplate",
            {"spec": {"spec": claim(exact("gone"))["spec"]}},
            [("DeviceClassNotFound", "spec.spec.devices.requests[0].exactly.deviceClassName")],
        ),
        (
            "DeviceClass",
            {"spec": {"config": [gpu_config(strategy="TimeSlicing", timeSlicingConfig={"interval": "Forever"})]}},
            [("InvalidDeviceConfig", "spec.config[0].opaque.parameters")],
        ),
    ],
)  # fmt: skip
def test_problems(kind: str, body: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    assert [(p.reason, p.field) for p in problems_of(kind, body, CLASSES, DRIVERS)] == expected


def test_the_message_names_the_bad_field_inside_the_parameters() -> None:
    config = gpu_config(strategy="MPS", mpsConfig={"defaultActiveThreadPercentage": 101})
    (problem,) = problems_of(
        "ResourceClaim", claim(exact("gpu.nvidia.com"), config=[config]), CLASSES, DRIVERS
    )
    assert problem.text().startswith(
        "spec.devices.config[0].opaque.parameters: GpuConfig: sharing.mpsConfig.defaultActiveThreadPercentage: "
        "must be between 0 and 100, got 101"
    )
