"""Fleets from files in the embedded cluster: a recording of a real node is a node whose slice is what the agent
published from the recording; node groups' labels, taints, driver versions and MIG configs reach the Node objects
and the published devices."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clusterkit import StartCluster, client_of, eventually
from gpudra.api.dra import Device
from gpudra.cluster.sim.fleetfile import load_fleet
from gpudra.cluster.up import EmbeddedCluster
from gpudra.kube.resources import NODES, RESOURCE_SLICES

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nvml"
RECORDINGS = sorted(FIXTURES.glob("*.json"))


async def published(cluster: EmbeddedCluster, node: str) -> list[Device]:
    assert cluster.client is not None

    async def devices() -> list[dict[str, Any]]:
        slices, _ = await client_of(cluster).list_raw(
            RESOURCE_SLICES, field_selector=f"spec.nodeName={node},spec.driver=gpu.nvidia.com"
        )
        return [d for s in slices for d in s["spec"].get("devices") or []]

    return [Device.model_validate(d) for d in await eventually(devices)]


def recorded_devices(recording: Path) -> list[Device]:
    """What the agent published from the recorded NVML readings (``gpudra hardware record`` stores it)."""
    return [Device.model_validate(d) for d in json.loads(recording.read_text())["devices"]]


@pytest.mark.parametrize("recording", RECORDINGS, ids=[p.stem for p in RECORDINGS])
async def test_a_recorded_node_publishes_what_the_agent_published_from_the_recording(
    start_cluster: StartCluster, tmp_path: Path, recording: Path
) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(f"profiles:\n- {{name: real, recording: {recording}}}\nnodes:\n- profile: real\n")
    cluster = await start_cluster(load_fleet(fleet))
    assert await published(cluster, "real-0") == recorded_devices(recording)


async def test_node_groups_reach_nodes_and_devices(start_cluster: StartCluster, tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        """
profiles:
- {name: small-a30, base: a30x4, gpus: 2}
nodes:
- profile: small-a30
  name: infer
  labels: {pool: inference}
  taints: [{key: dedicated, value: inference, effect: NoSchedule}]
  driverVersion: 570.172.08
  mig: {config: all-balanced}
"""
    )
    cluster = await start_cluster(load_fleet(fleet))
    assert cluster.client is not None
    node = await cluster.client.get_raw(NODES, "infer-0")
    assert node["metadata"]["labels"]["pool"] == "inference"
    assert node["metadata"]["labels"]["gpudra.dev/node-profile"] == "small-a30"
    assert node["spec"]["taints"] == [{"key": "dedicated", "value": "inference", "effect": "NoSchedule"}]
    devices = await published(cluster, "infer-0")
    profiles = sorted(d.attributes["profile"].string or "" for d in devices if d.attributes)
    assert profiles == sorted(["1g.6gb", "1g.6gb", "2g.12gb"] * 2)  # mig-parted all-balanced on A30, 2 GPUs
    assert {d.attributes["driverVersion"].version for d in devices if d.attributes} == {"570.172.8"}
