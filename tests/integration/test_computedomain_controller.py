"""The ComputeDomain controller in the embedded cluster (GB200 NVL72 trays): children and finalizer, status
from what the scheduler and the IMEX daemons report, what is missing named on the domain, several domains
on one node, and deletion that cleans up everything even while pods are stuck."""

from __future__ import annotations

import pytest
from _domain_kit import (
    DRIVER_NS,
    NS,
    allocate_channel,
    condition,
    create_domain,
    domain_events,
    label_clique,
    report_daemons,
    wait_status,
)

from clusterkit import StartCluster, eventually
from gpudra.cluster.up import EmbeddedCluster
from gpudra.computedomain.names import daemon_set_name, daemon_template_name, node_label_key
from gpudra.config import ControllerSettings
from gpudra.errors import NotFoundError
from gpudra.hardware.profiles import NVL72_CLIQUE_ID, SIMULATION_NAMESPACE
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import (
    COMPUTE_DOMAIN_CLIQUES,
    COMPUTE_DOMAINS,
    DAEMONSETS,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
)

TRAYS = [f"gb200-nvl72-{i}" for i in range(4)]


def rack_clique(rack: int) -> str:
    import uuid

    return f"{uuid.uuid5(SIMULATION_NAMESPACE, f'gb200-nvl72/rack/{rack}')}.{NVL72_CLIQUE_ID}"


CLIQUE = rack_clique(0)
FAST = {"computedomain_event_grace_seconds": 0.5, "computedomain_resync_seconds": 0.5}


@pytest.fixture
async def cluster(start_cluster: StartCluster) -> EmbeddedCluster:
    return await start_cluster("gb200-nvl72:4", controller=ControllerSettings(**FAST))


def client_of(cluster: EmbeddedCluster) -> KubeClient:
    assert cluster.client is not None
    return cluster.client


async def ready_domain(client: KubeClient, name: str, nodes: list[str]) -> str:
    uid = await create_domain(client, name)
    for node in nodes:
        await label_clique(client, node, CLIQUE)
        await allocate_channel(client, uid, node, f"{name}-{node}")
    await report_daemons(client, uid, CLIQUE, [(node, "Ready") for node in nodes])
    await wait_status(client, name, "Ready")
    return uid


async def test_domain_over_four_trays_gets_children_and_becomes_ready(cluster: EmbeddedCluster) -> None:
    client = client_of(cluster)
    uid = await create_domain(client, "train")

    async def children() -> bool:
        try:
            workload = await client.get(RESOURCE_CLAIM_TEMPLATES, "train-channel", NS)
            await client.get(RESOURCE_CLAIM_TEMPLATES, daemon_template_name(uid), DRIVER_NS)
            await client.get(DAEMONSETS, daemon_set_name(uid), DRIVER_NS)
        except NotFoundError:
            return False
        config = workload["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
        return bool(config["domainID"] == uid)

    await eventually(children)
    body = await client.get(COMPUTE_DOMAINS, "train", NS)
    assert "gpudra.dev/controller" in body["metadata"]["finalizers"]

    for node in TRAYS:
        await label_clique(client, node, CLIQUE)
        await allocate_channel(client, uid, node, f"worker-{node}")
    waiting = await wait_status(client, "train", "NotReady", "NodesNotReady")
    message = condition(waiting, "Ready")["message"]
    assert all(node in message for node in TRAYS) and "no IMEX daemon" in message

    await report_daemons(client, uid, CLIQUE, [(n, "Ready") for n in TRAYS[:3]] + [(TRAYS[3], "NotReady")])

    async def only_last_waits() -> bool:
        status = (await client.get(COMPUTE_DOMAINS, "train", NS)).get("status") or {}
        message = condition(status, "Ready").get("message", "")
        return TRAYS[3] in message and TRAYS[0] not in message

    await eventually(only_last_waits)
    await report_daemons(client, uid, CLIQUE, [(n, "Ready") for n in TRAYS])
    status = await wait_status(client, "train", "Ready", "AllNodesReady")
    assert sorted((n["name"], n["cliqueID"], n["index"], n["status"]) for n in status["nodes"]) == [
        (node, CLIQUE, i, "Ready") for i, node in enumerate(TRAYS)
    ]
    assert any(e["reason"] == "DomainReady" for e in await domain_events(client, "train"))
    sample = cluster.metrics.registry.get_sample_value
    assert sample("gpudra_computedomains", {"status": "Ready"}) == 1.0
    assert sample("gpudra_computedomain_ready_seconds_count") == 1.0
    assert not sample("gpudra_computedomain_status_conflicts_total")


async def test_tray_losing_its_fabric_makes_the_domain_not_ready_naming_it(cluster: EmbeddedCluster) -> None:
    client = client_of(cluster)
    await ready_domain(client, "fabric", TRAYS)
    await label_clique(client, TRAYS[2], None)  # the agent drops the label when NVML reports no clique

    status = await wait_status(client, "fabric", "NotReady", "NodesNotReady")
    assert condition(status, "NodesReady")["reason"] == "FabricLost"
    assert TRAYS[2] in condition(status, "Ready")["message"]
    assert [n["name"] for n in status["nodes"] if n["status"] == "NotReady"] == [TRAYS[2]]

    async def warned() -> bool:
        events = await domain_events(client, "fabric")
        return any(e["reason"] == "FabricLost" and TRAYS[2] in e["message"] for e in events)

    await eventually(warned)
    await label_clique(client, TRAYS[2], CLIQUE)
    await wait_status(client, "fabric", "Ready")


async def test_pods_of_one_domain_in_two_cliques_is_a_clique_mismatch(cluster: EmbeddedCluster) -> None:
    client = client_of(cluster)
    uid = await create_domain(client, "split")
    other = rack_clique(1)
    await label_clique(client, TRAYS[0], CLIQUE)
    await label_clique(client, TRAYS[1], other)
    for node in TRAYS[:2]:
        await allocate_channel(client, uid, node, f"split-{node}")
    await report_daemons(client, uid, CLIQUE, [(TRAYS[0], "Ready")])
    await report_daemons(client, uid, other, [(TRAYS[1], "Ready")])

    status = await wait_status(client, "split", "NotReady", "CliqueMismatch")
    message = condition(status, "CliqueConsistent")["message"]
    assert f"{CLIQUE}: {TRAYS[0]}" in message and f"{other}: {TRAYS[1]}" in message
    await eventually(
        lambda: _has_event(client, "split", "CliqueMismatch"),
    )


async def _has_event(client: KubeClient, name: str, reason: str) -> bool:
    return any(e["reason"] == reason for e in await domain_events(client, name))


async def test_daemonset_mode_names_the_domain_holding_a_node(cluster: EmbeddedCluster) -> None:
    client = client_of(cluster)
    first = await ready_domain(client, "first", TRAYS[:2])
    await client.patch(NODES, TRAYS[0], {"metadata": {"labels": {node_label_key(first): "true"}}})

    second = await create_domain(client, "second")
    await allocate_channel(client, second, TRAYS[0], "second-0")
    status = await wait_status(client, "second", "NotReady", "NodesNotReady")
    assert condition(status, "NodesReady")["reason"] == "NodeHeld"
    message = condition(status, "Ready")["message"]
    assert f"{TRAYS[0]}" in message and f"{NS}/first" in message and "one IMEX daemon" in message
    assert (await client.get(COMPUTE_DOMAINS, "first", NS))["status"]["status"] == "Ready"


async def test_host_managed_domains_share_nodes(start_cluster: StartCluster) -> None:
    cluster = await start_cluster(
        "gb200-nvl72:4", controller=ControllerSettings(imex_daemon_mode="host-managed", **FAST)
    )
    client = client_of(cluster)
    first = await ready_domain(client, "first", TRAYS)
    await client.patch(NODES, TRAYS[0], {"metadata": {"labels": {node_label_key(first): "true"}}})
    second = await ready_domain(client, "second", TRAYS)
    with pytest.raises(NotFoundError):  # host-managed: no per-domain daemons
        await client.get(DAEMONSETS, daemon_set_name(second), DRIVER_NS)
    assert (await client.get(COMPUTE_DOMAINS, "first", NS))["status"]["status"] == "Ready"


async def test_deletion_cleans_up_everything_while_a_pod_is_stuck(cluster: EmbeddedCluster) -> None:
    client = client_of(cluster)
    uid = await ready_domain(client, "gone", TRAYS[:2])
    for node in TRAYS[:2]:
        await client.patch(NODES, node, {"metadata": {"labels": {node_label_key(uid): "true"}}})
    stuck = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gone-worker", "namespace": NS, "finalizers": ["test.gpudra.dev/hold"]},
        "spec": {"schedulerName": "nobody", "containers": [{"name": "main", "image": "cuda"}]},
    }
    await client.create(PODS, stuck, NS)
    await client.delete(PODS, "gone-worker", NS)  # Terminating, held by its finalizer

    await client.delete(COMPUTE_DOMAINS, "gone", NS)

    async def domain_gone() -> bool:
        try:
            await client.get(COMPUTE_DOMAINS, "gone", NS)
        except NotFoundError:
            return True
        return False

    await eventually(domain_gone, timeout=30)
    templates, _ = await client.list(RESOURCE_CLAIM_TEMPLATES)
    assert [t["metadata"]["name"] for t in templates] == []
    with pytest.raises(NotFoundError):
        await client.get(DAEMONSETS, daemon_set_name(uid), DRIVER_NS)
    cliques, _ = await client.list(COMPUTE_DOMAIN_CLIQUES)
    assert cliques == []
    labelled, _ = await client.list(NODES, label_selector=node_label_key(uid))
    assert labelled == []
    assert (await client.get(PODS, "gone-worker", NS))["metadata"]["deletionTimestamp"]
    cleaned = [e for e in await domain_events(client, "gone") if e["reason"] == "CleanedUp"]
    assert cleaned and "gone-gb200-nvl72-0" in cleaned[0]["message"]
    assert cluster.metrics.registry.get_sample_value(
        "gpudra_computedomain_cleanups_total", {"result": "complete"}
    )
