"""kube-scheduler aborts a pod's scheduling attempt on an allocator error (allocerrorkit's repro): the reference
the embedded stand-in scheduler matches in tests/integration/test_scheduling_errors.py."""

from __future__ import annotations

import pytest
from _realkit import StartKubernetes

from allocerrorkit import FLEET, stays_pending_with_the_error


@pytest.mark.parametrize("bad", ["fx-1", "fx-2"], ids=["error-first", "fit-first"])
async def test_a_cel_runtime_error_on_one_node_keeps_the_pod_pending_with_the_error(
    start_kubernetes: StartKubernetes, bad: str
) -> None:
    await stays_pending_with_the_error(await start_kubernetes(FLEET), bad)
