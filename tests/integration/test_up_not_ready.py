"""A cluster that does not come up in time is one sentence saying what did not (and where to look), which
``gpudra up`` prints as one line, not a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudra.cluster.fleet import parse_fleet
from gpudra.cluster.up import ClusterNotReady, EmbeddedCluster, UpOptions


async def test_a_cluster_not_ready_in_time_says_what_is_missing(tmp_path: Path) -> None:
    options = UpOptions(
        nodes=parse_fleet("l4x4:2", {"l4x4"}), kubeconfig=tmp_path / "kubeconfig", ready_timeout=0.001
    )
    cluster = EmbeddedCluster(options)
    try:
        with pytest.raises(ClusterNotReady) as raised:
            await cluster.start()
    finally:
        await cluster.stop()
    said = str(raised.value)
    assert said.startswith("the cluster was not ready after 0s (")
    assert (
        "node steps (serving, slices published) not done" in said
        and f"{tmp_path / 'gpudra.log'} says why" in said
    )
    assert not (tmp_path / "kubeconfig").exists()  # nothing half-made is handed to the user
