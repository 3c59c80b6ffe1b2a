"""Event hygiene (kubernetes#137617 saw 2.29M events in 7 minutes for one pod): the same explanation on the same
object is posted at most once per window, whatever the retry rate; a changed explanation is posted."""

from __future__ import annotations

from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.resources import EVENTS, RESOURCE_CLAIMS

CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "pending", "namespace": "default"},
    "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
}


async def test_a_retry_storm_posts_one_event_per_distinct_message(apiserver: object) -> None:
    client = KubeClient.for_url(apiserver.url)  # type: ignore[attr-defined]
    try:
        claim = await client.create(RESOURCE_CLAIMS, CLAIM, "default")
        recorder = EventRecorder(client, "test", window_seconds=3600)
        posted = [
            await recorder.post(claim, "Warning", "DevicesInUse", "all 8 H100s in use") for _ in range(1000)
        ]
        assert posted.count(True) == 1
        assert recorder.suppressed == 999
        assert await recorder.post(claim, "Warning", "NoMatchingDevice", "no device matches") is True
        events, _ = await client.list(EVENTS, "default", field_selector="involvedObject.name=pending")
        assert sorted(e["reason"] for e in events) == ["DevicesInUse", "NoMatchingDevice"]
    finally:
        await client.close()
