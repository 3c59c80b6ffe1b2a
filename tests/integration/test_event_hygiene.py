"""Event hygiene (kubernetes#137617 saw 2.29M events in 7 minutes for one pod): the same explanation on the same
object is posted at most once per window, whatever the retry rate; a changed explanation is posted."""

from __future__ import annotations

from typing import Any

from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.resources import EVENTS, NAMESPACES, RESOURCE_CLAIMS

CLAIM: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "pending", "namespace": "default"},
    "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
}


async def test_a_retry_storm_posts_one_event_per_distinct_message(apiserver: EmbeddedAPIServer) -> None:
    client = KubeClient.for_url(apiserver.url, token=apiserver.token())
    try:
        claim = await client.create(RESOURCE_CLAIMS, CLAIM, "default")
        recorder = EventRecorder(client, "test", window_seconds=3600)
        posted = [
            await recorder.post(claim, "Warning", "DevicesInUse", "all 8 H100s in use") for _ in range(1000)
        ]
        assert posted.count(True) == 1
        assert recorder.suppressed == 999
        assert await recorder.post(claim, "Warning", "NoMatchingDevice", "no device matches") is True
        events, _ = await client.list_raw(EVENTS, "default", field_selector="involvedObject.name=pending")
        assert sorted(e["reason"] for e in events) == ["DevicesInUse", "NoMatchingDevice"]
    finally:
        await client.close()


async def test_a_repeat_after_the_window_counts_on_the_same_event(apiserver: EmbeddedAPIServer) -> None:
    """As client-go's correlator does: one Event whose count and lastTimestamp grow, a new one once it expired."""
    client = KubeClient.for_url(apiserver.url, token=apiserver.token())
    try:
        claim = await client.create(RESOURCE_CLAIMS, {**CLAIM, "metadata": {**CLAIM["metadata"]}}, "default")
        recorder = EventRecorder(client, "test", window_seconds=0, series=True)
        for _ in range(3):
            assert await recorder.post(claim, "Warning", "DevicesInUse", "all 8 H100s in use") is True
        (event,) = (await client.list_raw(EVENTS, "default", field_selector="involvedObject.name=pending"))[0]
        assert event["count"] == 3 and event["lastTimestamp"] >= event["firstTimestamp"]

        await client.delete(EVENTS, event["metadata"]["name"], "default")  # expired (the API server's TTL)
        assert await recorder.post(claim, "Warning", "DevicesInUse", "all 8 H100s in use") is True
        (again,) = (await client.list_raw(EVENTS, "default", field_selector="involvedObject.name=pending"))[0]
        assert again["metadata"]["name"] != event["metadata"]["name"] and again["count"] == 1
    finally:
        await client.close()


async def test_an_event_the_server_refused_is_posted_on_the_next_try(apiserver: EmbeddedAPIServer) -> None:
    """A refused post is no repeat: the same Event tried again within the window is posted, not dropped."""
    client = KubeClient.for_url(apiserver.url, token=apiserver.token())
    try:
        about = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "later", "uid": "u"},
        }
        recorder = EventRecorder(client, "test", window_seconds=3600)
        assert (
            await recorder.post(about, "Warning", "FailedPrepare", "no such GPU") is False
        )  # no namespace yet
        await client.create(NAMESPACES, {"metadata": {"name": "later"}})
        assert await recorder.post(about, "Warning", "FailedPrepare", "no such GPU") is True
        events, _ = await client.list_raw(EVENTS, "later")
        assert [e["message"] for e in events] == ["no such GPU"]
    finally:
        await client.close()
