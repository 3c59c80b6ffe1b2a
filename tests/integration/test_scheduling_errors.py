"""The stand-in scheduler aborts a pod's scheduling attempt on an allocator error as kube-scheduler does
(allocerrorkit's repro; the real control plane's run is tests/kubernetes/test_real_scheduling_errors.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from allocerrorkit import BUSY_POD, FLEET, all_devices_of_an_incomplete_pool, stays_pending_with_the_error
from clusterkit import StartCluster, eventually, kubectl
from gpudra.kube.resources import EVENTS, PODS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("bad", ["fx-1", "fx-2"], ids=["error-first", "fit-first"])
async def test_a_cel_runtime_error_on_one_node_keeps_the_pod_pending_with_the_error(
    start_cluster: StartCluster, bad: str
) -> None:
    await stays_pending_with_the_error(await start_cluster(FLEET), bad)


async def test_all_devices_of_an_incomplete_pool_abort_through_1_37_and_skip_the_node_from_1_38(
    start_cluster: StartCluster,
) -> None:
    await all_devices_of_an_incomplete_pool(await start_cluster(FLEET))


async def test_a_selector_over_the_cel_library_iteration_budget_keeps_the_pod_pending_with_a_sentence(
    start_cluster: StartCluster,
) -> None:
    """10,100 loop iterations, cost 61,411: the API server stores it (within Kubernetes' cost limit), and
    gpudra's CEL library stops at 10,000 iterations. The stand-in scheduler reports that as an allocator error on
    the pod, as kube-scheduler reports a selector's runtime error, and goes on scheduling (docs/fidelity.md: the
    real kube-scheduler would run this selector)."""
    cluster = await start_cluster("l4x4:1")
    await kubectl(cluster, "apply", "-f", "-", stdin=BUSY_POD)
    assert cluster.client is not None
    client = cluster.client

    async def told() -> list[str]:
        events, _ = await client.list_raw(EVENTS, "default", field_selector="involvedObject.name=busy")
        return [str(e.get("message") or "") for e in events if e.get("reason") == "FailedScheduling"]

    said = await eventually(told, timeout=30)
    assert "more than 10000 loop iterations in one evaluation: gpudra's CEL library stops there" in said[0]
    pod = await client.get_raw(PODS, "busy", "default")
    assert (pod.get("status") or {}).get("phase") == "Pending"
    # the scheduler is still at work: another pod gets its GPU
    await kubectl(cluster, "apply", "-f", str(ROOT / "examples" / "gpu-pod.yaml"))

    async def bound() -> str | None:
        return ((await client.get_raw(PODS, "gpu-pod", "default")).get("spec") or {}).get("nodeName")

    await eventually(bound, timeout=30)
