"""An agent process that dies on its own (a crash, the OOM killer) is started again, as the kubelet restarts a
DaemonSet's pod: pods created after it died run once it is back, without anyone starting it by hand."""

from __future__ import annotations

import os
import signal

from clusterkit import StartCluster, eventually, kubectl
from upgradekit import all_running, gpu_pod


async def test_a_crashed_agent_process_is_started_again(start_cluster: StartCluster) -> None:
    node = "l4x4-0"
    cluster = await start_cluster("l4x4:1", agent_processes=True, hardware_poll_seconds=0.1)
    await kubectl(cluster, "apply", "-f", "-", stdin=gpu_pod("before"))
    await all_running(cluster, ["before"])
    agent = cluster.agent_processes[node]
    crashed = agent.pid
    assert crashed is not None

    os.kill(crashed, signal.SIGKILL)  # from outside, as the OOM killer would
    await kubectl(cluster, "apply", "-f", "-", stdin=gpu_pod("after"))

    await eventually(
        lambda: agent.restarts == 1 and agent.running, timeout=60, what="the agent started again"
    )
    assert agent.pid != crashed
    await all_running(cluster, ["before", "after"])
    log = (cluster.node_dirs[node] / "agent.log").read_text()
    assert "prepared claims reconciled" in log
