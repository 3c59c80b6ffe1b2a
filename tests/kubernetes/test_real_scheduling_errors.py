"""kube-scheduler aborts a pod's scheduling attempt on an allocator error (allocerrorkit's repro): the reference
the embedded stand-in scheduler matches in tests/integration/test_scheduling_errors.py."""

from __future__ import annotations

import pytest
from _realkit import StartKubernetes

from allocerrorkit import BUSY_POD, FLEET, all_devices_of_an_incomplete_pool, stays_pending_with_the_error
from clusterkit import eventually, kubectl
from gpudra.kube.resources import PODS


@pytest.mark.parametrize("bad", ["fx-1", "fx-2"], ids=["error-first", "fit-first"])
async def test_a_cel_runtime_error_on_one_node_keeps_the_pod_pending_with_the_error(
    start_kubernetes: StartKubernetes, bad: str
) -> None:
    await stays_pending_with_the_error(await start_kubernetes(FLEET), bad)


async def test_all_devices_of_an_incomplete_pool_abort_through_1_37_and_skip_the_node_from_1_38(
    start_kubernetes: StartKubernetes,
) -> None:
    await all_devices_of_an_incomplete_pool(await start_kubernetes(FLEET))


async def test_kube_scheduler_allocates_a_selector_that_loops_past_the_cel_library_budget(
    start_kubernetes: StartKubernetes,
) -> None:
    """The reference for the difference docs/fidelity.md lists: 10,100 loop iterations within the cost limit are
    no error for kube-scheduler (the embedded stand-in keeps this pod Pending: tests/integration)."""
    cluster = await start_kubernetes("l4x4:1")
    await kubectl(cluster, "apply", "-f", "-", stdin=BUSY_POD)
    assert cluster.client is not None
    client = cluster.client

    async def bound() -> str | None:
        return ((await client.get_raw(PODS, "busy", "default")).get("spec") or {}).get("nodeName")

    assert await eventually(bound, timeout=60) == "l4x4-0"
