"""The stand-in control plane's bookkeeping: allocations assumed while their writes are in flight, and the
slow-start batches in which workloads create their pods."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from gpudra.allocator.pools import DeviceId
from gpudra.api.dra import AllocationResult
from gpudra.cluster.controlplane.state import ClusterState
from gpudra.cluster.controlplane.workloads import Workloads
from gpudra.errors import KubeError
from gpudra.kube.client import KubeClient
from gpudra.kube.informer import Informer
from gpudra.kube.resources import PODS

GPU = DeviceId("gpu.nvidia.com", "node-a", "gpu-0")
ALLOCATION = AllocationResult.model_validate(
    {
        "devices": {
            "results": [{"request": "gpu", "driver": GPU.driver, "pool": GPU.pool, "device": GPU.device}]
        }
    }
)


def claim(version: int, *, allocated: bool) -> dict[str, Any]:
    status = {"allocation": ALLOCATION.to_wire()} if allocated else {}
    return {
        "metadata": {"name": "c", "namespace": "ns", "uid": "u1", "resourceVersion": str(version)},
        "status": status,
    }


async def test_events_older_than_the_schedulers_own_write_do_not_free_an_assumed_allocation() -> None:
    state = ClusterState(cast(KubeClient, object()))
    await state.claim_event("ADDED", claim(3, allocated=False))
    state.assume("u1", ALLOCATION)
    assert state.snapshot.in_use(GPU)
    await state.claim_event("MODIFIED", claim(4, allocated=False))  # written by someone before our write
    assert state.snapshot.in_use(GPU)  # while the write is in flight, every event is older than it
    state.written("u1", claim(9, allocated=True))
    await state.claim_event("MODIFIED", claim(5, allocated=False))  # a late echo from before the write
    assert state.snapshot.in_use(GPU)
    await state.claim_event("MODIFIED", claim(9, allocated=True))
    await state.claim_event("MODIFIED", claim(12, allocated=False))  # deallocated afterwards: believed
    assert not state.snapshot.in_use(GPU)


async def test_a_failed_write_returns_the_devices_unless_the_claim_holds_them() -> None:
    state = ClusterState(cast(KubeClient, object()))
    state.assume("u1", ALLOCATION)
    state.unassume("u1", claim(3, allocated=False))
    assert not state.snapshot.in_use(GPU)
    state.assume("u1", ALLOCATION)
    state.unassume("u1", claim(4, allocated=True))  # the allocation was written before the binding failed
    assert state.snapshot.in_use(GPU)
    await state.claim_event("DELETED", claim(5, allocated=True))
    assert not state.snapshot.in_use(GPU)


async def test_a_pods_claims_are_found_by_owner_without_scanning_every_claim() -> None:
    state = ClusterState(cast(KubeClient, object()))
    owned = {
        "metadata": {"name": "p-gpu", "namespace": "ns", "uid": "c1", "ownerReferences": [{"uid": "pod-1"}]}
    }
    other = {
        "metadata": {"name": "q-gpu", "namespace": "ns", "uid": "c2", "ownerReferences": [{"uid": "pod-2"}]}
    }
    state.remember_claim(owned)  # written by the control plane; its watch event comes later
    state.claims.cache[("ns", "q-gpu")] = other  # as the informer keeps it before it calls the handler
    await state.claim_event("ADDED", other)
    assert state.owned_claims("pod-1") == [owned]
    assert state.owned_claims("pod-2") == [other]
    state.claims.cache.pop(("ns", "p-gpu"))
    await state.claim_event("DELETED", owned)
    assert state.owned_claims("pod-1") == []


class CountingClient:
    """Creates pods, failing from the ``fail_from``-th create on; records how many creates ran at once."""

    def __init__(self, fail_from: int | None = None) -> None:
        self.fail_from = fail_from
        self.created = 0
        self.running = 0
        self.batches: list[int] = []

    async def create(self, res: Any, body: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        if res is not PODS:
            return body  # the controller's Events
        self.running += 1
        if self.running == 1:
            self.batches.append(0)
        self.batches[-1] += 1
        await asyncio.sleep(0)
        self.running -= 1
        self.created += 1
        if self.fail_from is not None and self.created >= self.fail_from:
            raise KubeError("pods is forbidden: exceeded quota", status=403)
        return {**body, "metadata": {**body["metadata"], "name": f"p{self.created}"}}

    async def patch(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {}  # the Job's status


def job(pods: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ns", "uid": "j1"},
        "spec": {"parallelism": pods, "completions": pods, "template": {"spec": {"containers": []}}},
    }


async def test_a_job_creates_its_pods_in_doubling_batches() -> None:
    client = CountingClient()
    workloads = Workloads(cast(KubeClient, client), Informer(cast(KubeClient, client), PODS))
    await workloads.reconcile(job(100))
    assert client.created == 100
    assert client.batches == [1, 2, 4, 8, 16, 32, 37]


async def test_a_failing_create_stops_the_rest_of_the_job() -> None:
    client = CountingClient(fail_from=5)
    workloads = Workloads(cast(KubeClient, client), Informer(cast(KubeClient, client), PODS))
    with pytest.raises(KubeError, match="exceeded quota"):
        await workloads.reconcile(job(100))
    assert client.created == 7  # the batch of 4 in which the 5th failed ran out; no batch after it


async def test_the_node_list_is_the_same_object_until_a_node_changes() -> None:
    """The allocator resumes a first-fit scan for a claim shape only over the very list it scanned before."""
    state = ClusterState(cast(KubeClient, object()))
    node = {"metadata": {"name": "n1", "labels": {"zone": "a"}}}
    state.nodes.cache[("", "n1")] = node
    await state.nodes_event("ADDED", node)
    first = state.node_infos({"zone": "a"})
    assert [n.name for n in first] == ["n1"]
    assert state.node_infos({"zone": "a"}) is first
    assert state.node_infos({"zone": "b"}) == []
    state.nodes.cache[("", "n1")] = {"metadata": {"name": "n1", "labels": {"zone": "b"}}}
    await state.nodes_event("MODIFIED", state.nodes.cache[("", "n1")])
    assert state.node_infos({"zone": "a"}) == []
    assert [n.name for n in state.node_infos({"zone": "b"})] == ["n1"]
