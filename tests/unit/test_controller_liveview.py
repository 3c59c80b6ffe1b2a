"""The controller explains pending claims over the cluster its informers handed it (slices, classes, nodes, every
claim's allocation), kept in step change by change: an explanation round lists nothing from the API server (at
1,000 nodes a listed view cost about 2 s of CPU a round), and a device freed by a deleted claim counts as free at
once."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.api.core import Node
from gpudra.api.dra import DeviceClass, ResourceClaim, ResourceSlice
from gpudra.cluster.fleet import parse_fleet
from gpudra.cluster.simslices import node_objects
from gpudra.controller.pending import PendingClaims
from gpudra.devices.classes import load_device_classes
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import EVENTS, Resource
from gpudra.metrics import Metrics

NODE = "l4x4-0"


class _NoLists(KubeClient):
    """A client that answers /version, records the Events posted, and fails any list."""

    posted: list[dict[str, Any]]

    async def server_version(self) -> tuple[int, int]:
        return 1, 37

    async def create(
        self, res: Any, body: Any, namespace: str | None = None, *, dry_run: bool = False
    ) -> Any:
        assert res == EVENTS
        self.posted.append(body)
        return body

    async def list_raw(self, res: Resource, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"an explanation round listed {res.plural}")

    async def list(self, res: Any, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"an explanation round listed {res.plural}")


def _claim(name: str, device: str | None = None) -> ResourceClaim:
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": name},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
        },
    }
    if device is not None:
        results = [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": NODE, "device": device}]
        body["status"] = {"allocation": {"devices": {"results": results}}}
    return ResourceClaim.model_validate(body)


@pytest.fixture
def pending() -> PendingClaims:
    client = _NoLists.__new__(_NoLists)
    client.posted = []
    pending = PendingClaims(client, Metrics(), driver="gpu.nvidia.com")
    node, *slices = node_objects(parse_fleet("l4x4:1", {"l4x4"})[0])
    pending.live.node_changed(NODE, Node.model_validate(node))
    for body in slices:
        pending.live.slice_changed(body["metadata"]["name"], ResourceSlice.model_validate(body))
    for device_class in load_device_classes():
        pending.live.class_changed(device_class.metadata.name or "", device_class)
    return pending


def _classes() -> dict[str, DeviceClass]:
    return {c.metadata.name or "": c for c in load_device_classes()}


async def test_a_claim_waiting_on_busy_gpus_is_explained_without_a_list_and_names_their_holders(
    pending: PendingClaims,
) -> None:
    for i in range(4):
        pending.claim_changed(f"holder-{i}", _claim(f"holder-{i}", f"gpu-{i}"))
    pending.claim_changed("waiting", _claim("waiting"))

    said = await pending.check_all([pending.unallocated["waiting"]], _classes())

    assert list(said) == ["waiting"]
    posted = pending._client.posted  # type: ignore[attr-defined]
    assert [e["involvedObject"]["name"] for e in posted] == ["waiting"]
    assert "default/holder-0" in posted[0]["message"], posted[0]["message"]


async def test_a_gpu_freed_by_a_deleted_claim_counts_as_free_in_the_next_round(
    pending: PendingClaims,
) -> None:
    for i in range(4):
        pending.claim_changed(f"holder-{i}", _claim(f"holder-{i}", f"gpu-{i}"))
    pending.claim_changed("waiting", _claim("waiting"))
    assert await pending.check_all([pending.unallocated["waiting"]], _classes())

    pending.claim_changed("holder-2", None)  # deleted: gpu-2 is free

    assert await pending.check_all([pending.unallocated["waiting"]], _classes()) == {}
    assert "waiting" not in pending.said  # it fits now; the scheduler will get to it
