"""The controller stops cleanly however soon after its start and whatever it is busy with: no request of kopf's is
left retrying against a closed connection, and no watch stream, kopf's or an informer's, is left open for the event
loop's end. The burst of new objects reaches both ways the controller watches: kopf (MigLayouts) and the shared
informers (DeviceClasses). No thread the controller started outlives it."""

from __future__ import annotations

import logging
import threading

import pytest

from clusterkit import StartCluster, eventually
from gpudra.controller.miglayouts import MIGLAYOUTS
from gpudra.kube.resources import DEVICE_CLASSES


def device_class(name: str) -> dict[str, object]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": {}}


def mig_layout(name: str) -> dict[str, object]:
    """A MigLayout for no node (the fleet's MIG state stays as it is)."""
    return {
        "apiVersion": "gpudra.dev/v1alpha1",
        "kind": "MigLayout",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": {"example.com/none": "x"}},
            "layout": {"config": "all-balanced"},
        },
    }


@pytest.mark.parametrize("burst", [0, 40])
async def test_a_stop_right_after_start_or_amid_new_objects_leaves_nothing_behind(
    start_cluster: StartCluster, caplog: pytest.LogCaptureFixture, burst: int
) -> None:
    caplog.set_level(logging.WARNING)
    before = set(threading.enumerate())
    for round_ in range(3):
        cluster = await start_cluster("dgx-a100:1,l4x4:1")
        assert cluster.client is not None
        for i in range(burst):  # new objects: kopf's watcher hands each to a new worker as the stop comes
            await cluster.client.create(MIGLAYOUTS, mig_layout(f"burst-{round_}-{i}"))
            await cluster.client.create(DEVICE_CLASSES, device_class(f"burst-{round_}-{i}"))
        await cluster.stop()
    problems = [
        r.getMessage()
        for r in caplog.records
        if "Request attempt" in r.getMessage() or "asynchronous generator" in r.getMessage()
    ]
    assert not problems, problems

    def pool_threads() -> list[str]:
        """New threads but for health watchers (they end on their own within one NVML wait) and the pool of this
        test's event loop (asyncio_*, shut down with the loop)."""
        new = set(threading.enumerate()) - before
        return [t.name for t in new if not t.name.startswith(("health-", "asyncio_"))]

    await eventually(lambda: not pool_threads(), what="no thread of the stopped controllers left")
