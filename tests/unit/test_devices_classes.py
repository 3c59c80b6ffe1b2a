"""The shipped DeviceClasses: NVIDIA's names, and each selects exactly the device type it is meant for."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudra.allocator.cel.selectors import cel_device, compile_selector
from gpudra.api.dra import Device, DeviceAttribute
from gpudra.devices.classes import device_classes_text, load_device_classes, parse_device_classes
from gpudra.devices.sharing import SHARING_ATTRIBUTE
from gpudra.errors import ConfigurationError

REPO = Path(__file__).resolve().parents[2]
PACKAGE_COPY = REPO / "operator" / "gpudra" / "devices" / "deviceclasses.yaml"
MANIFEST_COPY = REPO / "manifests" / "base" / "deviceclasses.yaml"

# (driver, device) pairs as the two kubelet plugins publish them.
DEVICES: dict[str, tuple[str, Device]] = {
    kind: (driver, Device(name=name, attributes={"type": DeviceAttribute(string=type_), **extra}))
    for kind, driver, name, type_, extra in [
        ("gpu", "gpu.nvidia.com", "gpu-0", "gpu", {"gpudra.dev/nvlinkCount": DeviceAttribute(int_=0)}),
        (
            "shared-gpu",
            "gpu.nvidia.com",
            "gpu-3",
            "gpu",
            {SHARING_ATTRIBUTE: DeviceAttribute(string="TimeSlicing")},
        ),
        ("mig", "gpu.nvidia.com", "gpu-1-mig-1g5gb-19-0", "mig", {}),
        ("vfio", "gpu.nvidia.com", "gpu-vfio-2", "vfio", {}),
        ("daemon", "compute-domain.nvidia.com", "daemon-0", "daemon", {"id": DeviceAttribute(int_=0)}),
        ("channel-0", "compute-domain.nvidia.com", "channel-0", "channel", {"id": DeviceAttribute(int_=0)}),
        ("channel-1", "compute-domain.nvidia.com", "channel-1", "channel", {"id": DeviceAttribute(int_=1)}),
        (
            "domain-channel",  # a PodGroup-scoped ComputeDomain's, published by the controller
            "compute-domain.nvidia.com",
            "channel-0",
            "domain-channel",
            {
                "id": DeviceAttribute(int_=0),
                "domainID": DeviceAttribute(string="0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"),
            },
        ),
        ("other-gpu", "gpu.example.com", "gpu-0", "gpu", {}),
    ]
}


def matches(expression: str, driver: str, device: Device) -> bool:
    return compile_selector(expression).matches(cel_device(driver, device))


def selected(class_name: str) -> set[str]:
    (device_class,) = [c for c in load_device_classes() if c.metadata.name == class_name]
    expressions = [s.cel.expression for s in device_class.spec.selectors or [] if s.cel is not None]
    assert expressions, class_name
    return {
        kind
        for kind, (driver, device) in DEVICES.items()
        if all(matches(expression, driver, device) for expression in expressions)
    }


@pytest.mark.parametrize(
    ("class_name", "kinds"),
    [
        ("gpu.nvidia.com", {"gpu"}),
        ("mig.nvidia.com", {"mig"}),
        ("vfio.gpu.nvidia.com", {"vfio"}),
        ("compute-domain-daemon.nvidia.com", {"daemon"}),
        ("compute-domain-default-channel.nvidia.com", {"channel-0"}),
        ("compute-domain-shared-channel.gpudra.dev", {"domain-channel"}),
    ],
)
def test_each_class_selects_exactly_its_device_type(class_name: str, kinds: set[str]) -> None:
    assert selected(class_name) == kinds


def test_the_classes_are_nvidias_and_only_gpu_maps_the_extended_resource() -> None:
    classes = load_device_classes()
    assert [(c.api_version, c.kind, c.metadata.name) for c in classes] == [
        ("resource.k8s.io/v1", "DeviceClass", "gpu.nvidia.com"),
        ("resource.k8s.io/v1", "DeviceClass", "mig.nvidia.com"),
        ("resource.k8s.io/v1", "DeviceClass", "vfio.gpu.nvidia.com"),
        ("resource.k8s.io/v1", "DeviceClass", "compute-domain-daemon.nvidia.com"),
        ("resource.k8s.io/v1", "DeviceClass", "compute-domain-default-channel.nvidia.com"),
        ("resource.k8s.io/v1", "DeviceClass", "compute-domain-shared-channel.gpudra.dev"),  # gpudra's own
    ]
    assert {
        c.metadata.name: c.spec.extended_resource_name for c in classes if c.spec.extended_resource_name
    } == {"gpu.nvidia.com": "nvidia.com/gpu"}


def test_other_driver_names_rewrite_the_selectors() -> None:
    classes = load_device_classes(gpu_driver="gpu.example.org", compute_domain_driver="cd.example.org")
    text = " ".join(s.cel.expression for c in classes for s in c.spec.selectors or [] if s.cel is not None)
    assert "nvidia.com'" not in text
    assert "device.driver == 'gpu.example.org'" in text
    assert "device.attributes['cd.example.org'].type == 'channel'" in text


def test_a_manifest_with_other_objects_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="only DeviceClass"):
        parse_device_classes("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")


def test_the_manifest_copy_matches_the_packaged_classes() -> None:
    assert device_classes_text() == PACKAGE_COPY.read_text(encoding="utf-8")
    assert MANIFEST_COPY.read_text(encoding="utf-8") == PACKAGE_COPY.read_text(encoding="utf-8"), (
        "manifests/base/deviceclasses.yaml differs from the canonical copy; run: "
        "cp operator/gpudra/devices/deviceclasses.yaml manifests/base/deviceclasses.yaml"
    )
