"""An agent that starts while its API server is down (a node that boots before the control plane, a restart of
kube-apiserver) waits for it, as a DaemonSet pod would be restarted, and publishes once it answers: it used to exit
within a second with "cannot connect"."""

from __future__ import annotations

import asyncio
from pathlib import Path

from clusterkit import eventually
from gpudra.cluster.agentprocess import AgentProcess
from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.cluster.fleet import node_object, parse_fleet
from gpudra.cluster.processes import free_port
from gpudra.config import AgentSettings
from gpudra.kube.client import KubeClient
from gpudra.kube.kubeconfig import Credentials, write_kubeconfig
from gpudra.kube.resources import NODES, RESOURCE_SLICES


async def test_an_agent_started_before_its_api_server_publishes_once_it_answers(tmp_path: Path) -> None:
    port = free_port()
    server = EmbeddedAPIServer(port=port)
    # the address it will serve at; nothing answers there yet
    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig", Credentials(server=f"http://127.0.0.1:{port}", token=server.token())
    )
    (node,) = parse_fleet("dgx-h100:1", {"dgx-h100"})
    settings = AgentSettings(
        node_name=node.name,
        backend="simulated",
        simulated_profile="dgx-h100",
        kubeconfig=kubeconfig,
        serve_kubelet_plugin=False,
        hardware_poll_seconds=0.2,
    )
    agent = AgentProcess(settings, tmp_path / "agent.log")
    starting = asyncio.create_task(agent.start(timeout=120))  # done once its slices are published
    try:

        async def waiting() -> bool:
            return agent_log(tmp_path).count("API server not reachable yet") >= 2  # a line per attempt, alive

        await eventually(waiting, timeout=60, what="the agent waiting for its API server")
        assert not starting.done()
        await server.start()
        client = KubeClient.for_url(server.url, token=server.token(), field_manager="test")
        try:
            await client.apply_object(NODES, node_object(node))
            await starting  # ready: its slices are published
            slices, _ = await client.list_raw(RESOURCE_SLICES)
            assert {s["spec"]["nodeName"] for s in slices} == {node.name}
        finally:
            await client.close()
        assert "Traceback" not in agent_log(tmp_path)
    finally:
        await agent.stop()
        await server.stop()


def agent_log(directory: Path) -> str:
    path = directory / "agent.log"
    return path.read_text() if path.exists() else ""
