"""A gpudra process's log follows its pod's ``GPUDRA_LOG_FORMAT`` and ``GPUDRA_LOG_LEVEL`` (the Helm chart's
``logFormat`` and ``logLevel``), not only the flags: the agent and the controller used to read both settings and
log in the console format at INFO whatever they said, so a cluster's log pipeline got no JSON from an installed
gpudra and ``logLevel: DEBUG`` showed nothing more."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from clusterkit import eventually
from gpudra.cluster.agentprocess import AgentProcess
from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.cluster.fleet import node_object, parse_fleet
from gpudra.cluster.processes import free_port
from gpudra.config import AgentSettings
from gpudra.kube.client import KubeClient
from gpudra.kube.kubeconfig import Credentials, write_kubeconfig
from gpudra.kube.resources import NODES

NOT_REACHABLE = "API server not reachable yet"


def agent_settings(kubeconfig: Path, node_name: str, **logging: str) -> AgentSettings:
    return AgentSettings(
        node_name=node_name,
        backend="simulated",
        simulated_profile="dgx-h100",
        kubeconfig=kubeconfig,
        serve_kubelet_plugin=False,
        **logging,  # type: ignore[arg-type]
    )


def records(log: Path) -> list[dict[str, Any]]:
    """Each line of the log as the JSON object it must be (a line that is not one fails the test here)."""
    lines = log.read_text().splitlines() if log.exists() else []
    return [json.loads(line) for line in lines if line.strip()]


async def test_the_agent_logs_json_when_its_pod_says_so(tmp_path: Path) -> None:
    port = free_port()  # nothing answers there: the agent logs a warning per try
    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig", Credentials(server=f"http://127.0.0.1:{port}", token="t")
    )
    agent = AgentProcess(agent_settings(kubeconfig, "dgx-h100-0", log_format="json"), tmp_path / "agent.log")
    starting = asyncio.create_task(agent.start(timeout=120))
    try:

        async def two_tries() -> bool:
            return (
                sum(str(r.get("event")).startswith(NOT_REACHABLE) for r in records(tmp_path / "agent.log"))
                >= 2
            )

        await eventually(two_tries, timeout=60, what="two tries to reach the API server, logged as JSON")
        tries = [r for r in records(tmp_path / "agent.log") if str(r.get("event")).startswith(NOT_REACHABLE)]
        assert {r["level"] for r in tries} == {"warning"}
        assert all("timestamp" in r and "logger" in r for r in tries)
    finally:
        starting.cancel()
        await agent.stop()


async def test_the_agent_keeps_to_its_pods_log_level(tmp_path: Path) -> None:
    server = EmbeddedAPIServer(port=free_port())
    await server.start()
    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig", Credentials(server=server.url, token=server.token())
    )
    (node,) = parse_fleet("dgx-h100:1", {"dgx-h100"})
    client = KubeClient.for_url(server.url, token=server.token(), field_manager="test")
    settings = agent_settings(kubeconfig, node.name, log_format="json", log_level="WARNING")
    agent = AgentProcess(settings, tmp_path / "agent.log")
    try:
        await client.apply_object(NODES, node_object(node))
        await agent.start(timeout=120)  # ready: its slices are published, which it logs at INFO
        assert [r for r in records(tmp_path / "agent.log") if r["level"] in ("info", "debug")] == []
    finally:
        await agent.stop()
        await client.close()
        await server.stop()
