"""A pod deleted while its node's agent is down: the stand-in kubelet keeps trying to unprepare its claim, as the
real kubelet does, and does it once the agent is back. Nothing is left prepared or being torn down.

(The embedded API server removes a deleted pod at once, where kube-apiserver keeps it Terminating until its kubelet
is done; the kubelet's retries are the same either way.)"""

from __future__ import annotations

from clusterkit import StartCluster, eventually, kubectl
from gpudra.kube.resources import PODS
from upgradekit import all_running, checkpoint, claim_uids, gpu_pod


async def test_a_pod_deleted_while_its_agent_is_down_is_unprepared_once_the_agent_is_back(
    start_cluster: StartCluster,
) -> None:
    node = "l4x4-0"
    cluster = await start_cluster("l4x4:1", agent_processes=True, hardware_poll_seconds=0.1)
    client = cluster.client
    assert client is not None
    await kubectl(cluster, "apply", "-f", "-", stdin=gpu_pod("train"))
    await all_running(cluster, ["train"])
    uid = (await client.get_raw(PODS, "train", "default"))["metadata"]["uid"]
    prepared = set((await claim_uids(cluster, ["train"])).values())
    assert set(checkpoint(cluster, node)) == prepared

    agent = cluster.agent_processes[node]
    await agent.kill()
    await client.delete(PODS, "train", "default")
    kubelet = cluster.kubelets[node]
    await eventually(lambda: uid in kubelet.terminating, what="the kubelet tearing the pod down")
    # the kubelet cannot unprepare the claim while the agent is down: it is still prepared on the node
    assert set(checkpoint(cluster, node)) == prepared

    await agent.start()
    await eventually(
        lambda: not kubelet.terminating, timeout=60, what="the pod torn down after the agent is back"
    )
    assert checkpoint(cluster, node) == {}
