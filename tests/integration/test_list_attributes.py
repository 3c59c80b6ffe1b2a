"""List-typed attributes in the embedded cluster (``list_attributes``): with the API server's DRAListTypeAttributes
gate on, each full GPU carries gpudra.dev/nvlinkPeers and claims can keep their GPUs within one NVLink island; with
it off, the agent finds out with a dry-run write, publishes scalar attributes only and says why on the Node, and a
new claim using includes() is refused as kube-apiserver refuses it (tests/kubernetes runs the same on the real one)."""

from __future__ import annotations

from clusterkit import StartCluster
from listattrkit import GATE, NODE, gate_off_scenario, gate_on_scenario, start


async def test_with_the_gate_on_claims_stay_within_an_nvlink_island(start_cluster: StartCluster) -> None:
    await gate_on_scenario(await start(start_cluster, GATE))


async def test_with_the_gate_off_only_scalars_are_published_and_the_node_says_why(
    start_cluster: StartCluster,
) -> None:
    cluster = await start(start_cluster)
    await gate_off_scenario(cluster)
    support = cluster.agents[NODE].lists.support
    assert support is not None and support.settled and not support.kept


async def test_emulating_kubernetes_1_36_matchattribute_on_a_list_allocates_nothing(
    start_cluster: StartCluster,
) -> None:
    """As kube-scheduler 1.36 does (tests/kubernetes runs the same scenario on it): includes() works, a
    matchAttribute over the list matches no two devices, and the controller says why."""
    await gate_on_scenario(await start(start_cluster, GATE, kubernetes_version="1.36"))
