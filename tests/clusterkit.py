"""A factory for running embedded clusters in tests (the `start_cluster` fixture, registered by tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gpudra.cluster.fleet import parse_fleet
from gpudra.cluster.up import EmbeddedCluster, UpOptions

StartCluster = Callable[..., Awaitable[EmbeddedCluster]]


@pytest.fixture
async def start_cluster(tmp_path: Path) -> AsyncIterator[StartCluster]:
    """``await start_cluster("dgx-h100:1,l4x4:1", **UpOptions fields)``: a running embedded cluster (as `gpudra up`
    runs it, kubeconfig in the test's tmp dir), stopped after the test."""
    started: list[EmbeddedCluster] = []

    async def start(fleet: str, **options: Any) -> EmbeddedCluster:
        profiles = {part.split(":")[0].strip() for part in fleet.split(",")}
        options.setdefault("kubeconfig", tmp_path / f"cluster-{len(started)}" / "kubeconfig")
        cluster = EmbeddedCluster(UpOptions(nodes=parse_fleet(fleet, profiles), **options))
        started.append(cluster)
        await cluster.start()
        return cluster

    try:
        yield start
    finally:
        for cluster in started:
            await cluster.stop()
