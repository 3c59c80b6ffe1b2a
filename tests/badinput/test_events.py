"""The bad-input corpus past the API server: what Kubernetes accepts but cannot work (a DeviceClass that does not
exist yet, NVIDIA opaque configs that the driver refuses) gets a Warning Event on the object naming the field, as
soon as it is written, with no pod needed. Never a silent pending."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from _corpus import ACCEPTED, HERE, VALID

from clusterkit import StartCluster, eventually
from gpudra.cluster.up import EmbeddedCluster
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import DEVICE_CLASSES, EVENTS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, Resource

RESOURCES: dict[str, Resource] = {
    "ResourceClaim": RESOURCE_CLAIMS,
    "ResourceClaimTemplate": RESOURCE_CLAIM_TEMPLATES,
    "DeviceClass": DEVICE_CLASSES,
}
EXPECTED = {
    "event-claim-class-missing": (
        "DeviceClassNotFound",
        'spec.devices.requests[0].exactly.deviceClassName: DeviceClass "gpu.example.com" does not exist (yet)',
    ),
    "event-claim-sharing-strategy-unknown": (
        "InvalidDeviceConfig",
        "spec.devices.config[0].opaque.parameters: GpuConfig: sharing.strategy: Input should be 'TimeSlicing' or "
        "'MPS'",
    ),
    "event-claim-mps-thread-percentage-over-100": (
        "InvalidDeviceConfig",
        "spec.devices.config[0].opaque.parameters: GpuConfig: sharing.mpsConfig.defaultActiveThreadPercentage: must "
        "be between 0 and 100, got 150",
    ),
    "event-claim-gpuconfig-unknown-field": (
        "InvalidDeviceConfig",
        "spec.devices.config[0].opaque.parameters: GpuConfig: sharing.timeSlicingConfig.intervall: unknown field",
    ),
    "event-template-sharing-strategy-unknown": (
        "InvalidDeviceConfig",
        "spec.spec.devices.config[0].opaque.parameters: GpuConfig: sharing.strategy: Input should be",
    ),
    "event-class-gpuconfig-unknown-field": (
        "InvalidDeviceConfig",
        "spec.config[0].opaque.parameters: GpuConfig: sharing.timeslicingConfig: unknown field",
    ),
}


def test_every_accepted_case_has_an_expected_event() -> None:
    assert set(EXPECTED) == set(ACCEPTED) - VALID


async def warnings_on(client: KubeClient, name: str) -> list[dict[str, Any]]:
    events, _ = await client.list_raw(EVENTS, None, field_selector=f"involvedObject.name={name}")
    return [e for e in events if e["type"] == "Warning"]


@pytest.fixture
async def cluster(start_cluster: StartCluster) -> EmbeddedCluster:
    return await start_cluster("l4x4:1")


async def test_each_accepted_bad_object_gets_an_event_naming_the_field(cluster: EmbeddedCluster) -> None:
    client = cluster.client
    assert client is not None
    for name, (reason, words) in EXPECTED.items():
        obj = yaml.safe_load((HERE / f"{name}.yaml").read_text())
        resource: Resource = RESOURCES[obj["kind"]]
        await client.create(resource, obj, "default" if resource.namespaced else None)
        object_name = obj["metadata"]["name"]

        async def told(object_name: str = object_name, reason: str = reason) -> list[dict[str, Any]]:
            return [e for e in await warnings_on(client, object_name) if e["reason"] == reason]

        (event,) = await eventually(told)
        assert words in event["message"], event["message"]
        assert event["involvedObject"]["kind"] == obj["kind"]
