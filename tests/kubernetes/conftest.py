"""The real-control-plane tier: etcd, kube-apiserver, kube-scheduler and kube-controller-manager built by
``make kubernetes`` (``make test`` builds them first). Without the binaries these tests fail, naming
``make kubernetes``: they are never skipped."""

from __future__ import annotations

from typing import Any

import pytest
from _realkit import FAST_CONTROLLER, StartKubernetes

from clusterkit import StartCluster
from gpudra.cluster.fleet import FleetNode
from gpudra.cluster.up import EmbeddedCluster


@pytest.fixture
def start_kubernetes(start_cluster: StartCluster) -> StartKubernetes:
    """``await start_kubernetes("dgx-h100:1", **UpOptions fields)`` (the fleet may be a list of nodes, as for
    ``start_cluster``): ``gpudra up --control-plane kubernetes``."""

    async def start(fleet: str | list[FleetNode], **options: Any) -> EmbeddedCluster:
        options.setdefault("controller", FAST_CONTROLLER)
        options.setdefault("hardware_poll_seconds", 0.1)
        return await start_cluster(fleet, control_plane="kubernetes", **options)

    return start
