"""The embedded API server in a process of its own (``gpudra up --api-server-process``, ``bench computedomain
--api-server-process``): the cluster works as with the in-process server, the kubeconfig points at it, its 409s are
readable over HTTP, feature gates reach it, and stopping the cluster ends the process."""

from __future__ import annotations

import gc
import os
import socket
import sys
from pathlib import Path

import pytest
import yaml

from clusterkit import StartCluster, eventually
from gpudra.cluster import up
from gpudra.cluster.apiserver.local import InProcessTransport
from gpudra.cluster.apiserver.process import APIServerProcess
from gpudra.cluster.interpreter import CLUSTER_GC_THRESHOLDS
from gpudra.errors import ConflictError
from gpudra.kube.resources import CONFIGMAPS, NODES, PODS
from listattrkit import GATE, gate_on_scenario, start


async def test_a_cluster_with_its_api_server_in_another_process(start_cluster: StartCluster) -> None:
    cluster = await start_cluster("l4x4:1", api_server_process=True)
    client = cluster.client
    assert client is not None and cluster.server is None and cluster.server_process is not None
    server = cluster.server_process
    assert server.pid is not None and server.pid != 0
    kubeconfig = yaml.safe_load(cluster.options.kubeconfig.read_text())
    assert kubeconfig["clusters"][0]["cluster"]["server"] == cluster.url == server.url

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "containers": [{"name": "c", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": 1}}}]
        },
    }
    await client.create(PODS, pod, "default")

    async def running() -> bool:
        body = await client.get_raw(PODS, "p", "default")
        return (body.get("status") or {}).get("phase") == "Running"

    await eventually(running, timeout=30)  # scheduled, its GPU claim prepared by the node's agent

    created = await client.create(CONFIGMAPS, {"metadata": {"name": "c"}, "data": {"k": "1"}}, "default")
    stale = {**created, "data": {"k": "2"}}
    await client.replace(CONFIGMAPS, {**created, "data": {"k": "3"}})
    with pytest.raises(ConflictError):
        await client.replace(CONFIGMAPS, stale)
    assert (await server.conflicts_by_resource())["configmaps"] == 1

    pid = server.pid
    await cluster.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the server process ended (and was reaped)


async def test_a_server_process_that_cannot_listen_says_so(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = APIServerProcess(port=taken.getsockname()[1], kubeconfig=tmp_path / "kubeconfig")
        with pytest.raises(RuntimeError, match="exited before it served"):
            await server.start()
    assert server.pid is None


async def test_a_large_fleet_with_its_api_server_apart_keeps_the_gates_it_was_given(
    start_cluster: StartCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(up, "LARGE_FLEET", 1)  # a one-node fleet counts as large here
    interval, thresholds = sys.getswitchinterval(), gc.get_threshold()
    cluster = await start(start_cluster, GATE, api_server_process=True)
    assert cluster.server is None and cluster.server_process is not None
    assert sys.getswitchinterval() == up.LARGE_FLEET_SWITCH_INTERVAL
    assert gc.get_threshold() == CLUSTER_GC_THRESHOLDS
    await gate_on_scenario(cluster)  # list attributes are kept: the gate reached the server's process
    await cluster.stop()
    assert (sys.getswitchinterval(), gc.get_threshold()) == (interval, thresholds)


async def test_a_large_fleet_keeps_its_api_server_in_process_unless_told_otherwise(
    start_cluster: StartCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the cluster's process the nodes call the server without HTTP, which beats a server apart even at
    1,000 nodes: a large fleet no longer moves it out by itself."""
    monkeypatch.setattr(up, "LARGE_FLEET", 1)
    cluster = await start_cluster("l4x4:1")
    assert cluster.large_fleet
    assert cluster.server is not None and cluster.server_process is None
    assert cluster.client is not None
    assert isinstance(cluster.client._transport, InProcessTransport)
    nodes, _ = await cluster.client.list_raw(NODES)
    assert [n["metadata"]["name"] for n in nodes] == ["l4x4-0"]
