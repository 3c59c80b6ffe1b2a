"""The real-node tier: simulated nodes run as real nodes (a real kubelet over containerd, runc and the CNI bridge,
in namespaces of their own) with gpudra installed by its Helm chart from its image, on the real control plane.
Needs root and what ``make kubernetes``, ``make helm``, ``make node`` and ``make images`` build (``make test``
builds them first); without them these tests fail, naming the command: they are never skipped."""

from __future__ import annotations

from typing import Any

import pytest
from _nodekit import FAST_CONTROLLER, StartRealNodes

from clusterkit import StartCluster
from gpudra.cluster.up import EmbeddedCluster


@pytest.fixture
def start_real_nodes(start_cluster: StartCluster) -> StartRealNodes:
    """``await start_real_nodes("dgx-h100:2", **UpOptions fields)``: every node of the fleet a real node."""

    async def start(fleet: str, **options: Any) -> EmbeddedCluster:
        options.setdefault("controller", FAST_CONTROLLER)
        options.setdefault("hardware_poll_seconds", 0.25)
        count = sum(int(part.split(":")[1]) for part in fleet.split(","))
        return await start_cluster(fleet, control_plane="kubernetes", real_nodes=count, **options)

    return start
