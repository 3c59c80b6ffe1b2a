"""The controller explains claims that stay pending (Events with the allocator's reason, bounded by dedup), counts
them by reason in metrics, and never puts a finalizer on a claim it does not own."""

from __future__ import annotations

from typing import Any

import pytest

from clusterkit import StartCluster, eventually
from gpudra.cluster.up import EmbeddedCluster
from gpudra.config import ControllerSettings
from gpudra.kube.resources import EVENTS, RESOURCE_CLAIMS


@pytest.fixture
async def cluster(start_cluster: StartCluster) -> EmbeddedCluster:
    return await start_cluster(
        "l4x4:1", controller=ControllerSettings(pending_grace_seconds=0.2, pending_interval_seconds=0.2)
    )


def claim(name: str, expression: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {"expression": expression}}]}}]}},
    }  # fmt: skip


async def test_pending_claim_gets_one_explaining_event(cluster: EmbeddedCluster) -> None:
    assert cluster.client is not None
    expression = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'
    await cluster.client.create(RESOURCE_CLAIMS, claim("wants-h100", expression), "default")
    client = cluster.client

    async def explained() -> list[dict[str, Any]]:
        events, _ = await client.list_raw(EVENTS, "default", field_selector="involvedObject.name=wants-h100")
        return [e for e in events if e["source"]["component"] == "gpudra-controller"]

    events = await eventually(explained, 20, what="an explanation Event from the controller")
    assert events[0]["reason"] == "NoMatchingDevice"
    assert "NVIDIA H100 80GB HBM3" in events[0]["message"] or "no matching device" in events[0]["message"]

    rounds = cluster.metrics.registry.get_sample_value("gpudra_explain_round_seconds_count") or 0
    await eventually(  # three more rounds of explaining: the same explanation is not posted again
        lambda: (
            (cluster.metrics.registry.get_sample_value("gpudra_explain_round_seconds_count") or 0)
            >= rounds + 3
        ),
        what="three more rounds of explanations",
    )
    again, _ = await cluster.client.list_raw(
        EVENTS, "default", field_selector="involvedObject.name=wants-h100"
    )
    assert len([e for e in again if e["source"]["component"] == "gpudra-controller"]) == 1

    body = await cluster.client.get_raw(RESOURCE_CLAIMS, "wants-h100", "default")
    assert not body["metadata"].get("finalizers")
    text = cluster.metrics.registry.get_sample_value("gpudra_pending_claims", {"reason": "NoMatchingDevice"})
    assert text == 1.0
