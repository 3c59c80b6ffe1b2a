"""The compute-domain driver of the node agent in the embedded cluster (GB200 NVL72 trays).

The controller creates the domain's children; the stand-in DaemonSet controller, scheduler and kubelet do the
rest: a workload pod's channel claim labels its node, the domain's daemon pod lands there and registers, and the
channel is prepared once that daemon is Ready. (The domain's status is tested with the controller.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from _domain_kit import DRIVER_NS, NS, domain, workload_pod

from clusterkit import StartCluster, eventually
from gpudra.agent.recovery import recover
from gpudra.cluster.up import EmbeddedCluster
from gpudra.computedomain.clique import CLIQUE_LABEL
from gpudra.computedomain.names import clique_object_name, node_label_key
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import (
    COMPUTE_DOMAIN_CLIQUES,
    COMPUTE_DOMAINS,
    EVENTS,
    NODES,
    PODS,
    RESOURCE_SLICES,
)
from gpudra.testing import watch_until

CD = "compute-domain.nvidia.com"


async def make_domain(client: KubeClient, name: str, *, allocation_mode: str = "Single") -> str:
    """Create the ComputeDomain (the controller creates its children); return its UID."""
    created = await client.create(COMPUTE_DOMAINS, domain(name, mode=allocation_mode), NS)
    return str(created["metadata"]["uid"])


async def phase(client: KubeClient, name: str) -> str:
    pod = await client.get_raw(PODS, name, NS)
    return str((pod.get("status") or {}).get("phase") or "")


def cd_specs(cluster: EmbeddedCluster, node: str) -> list[dict[str, Any]]:
    directory: Path = cluster.node_dirs[node] / "cdi"
    return [
        json.loads(p.read_text())
        for p in sorted(directory.glob("k8s.compute-domain.nvidia.com-claim_*.json"))
    ]


def channel_minors(spec: dict[str, Any]) -> list[int]:
    return [n["minor"] for d in spec["devices"] for n in (d["containerEdits"].get("deviceNodes") or [])]


async def labels(client: KubeClient, node: str) -> dict[str, str]:
    return dict((await client.get_raw(NODES, node))["metadata"].get("labels") or {})


async def test_trays_publish_clique_and_compute_domain_devices(start_cluster: StartCluster) -> None:
    cluster = await start_cluster("gb200-nvl72:2,dgx-h100:1")
    client = cluster.client
    assert client is not None
    tray = await eventually(lambda: labels(client, "gb200-nvl72-0"))
    clique = await eventually(lambda: _label(client, "gb200-nvl72-0"))
    assert clique == await eventually(lambda: _label(client, "gb200-nvl72-1"))  # one rack, one clique
    assert CLIQUE_LABEL not in await labels(client, "dgx-h100-0")  # NVLink inside the node only
    assert tray

    async def cd_slice() -> list[dict[str, Any]]:
        items, _ = await client.list_raw(RESOURCE_SLICES)
        found = [s for s in items if s["spec"]["driver"] == CD]
        return found if len(found) == 2 else []  # both trays published

    slices = await eventually(cd_slice)
    assert {s["spec"]["nodeName"] for s in slices} == {"gb200-nvl72-0", "gb200-nvl72-1"}
    devices = {d["name"]: d for d in slices[0]["spec"]["devices"]}
    assert set(devices) == {"channel-0", "daemon-0"}
    assert devices["channel-0"]["attributes"]["cliqueID"] == {"string": clique}


async def _label(client: KubeClient, node: str) -> str:
    return (await labels(client, node)).get(CLIQUE_LABEL, "")


async def test_channel_waits_for_the_daemon_then_gets_channel_0(start_cluster: StartCluster) -> None:
    cluster = await start_cluster("gb200-nvl72:2")
    client = cluster.client
    assert client is not None
    uid = await make_domain(client, "ring")
    await client.create(PODS, workload_pod("worker", "ring", "gb200-nvl72-1"), NS)

    async def running() -> bool:
        return await phase(client, "worker") == "Running"

    await eventually(running, timeout=30)
    node_labels = await labels(client, "gb200-nvl72-1")
    assert node_labels[node_label_key(uid)] == "true"
    clique_id = node_labels[CLIQUE_LABEL]
    clique = await client.get_raw(COMPUTE_DOMAIN_CLIQUES, clique_object_name(uid, clique_id), DRIVER_NS)
    assert [(d["nodeName"], d["index"], d["status"]) for d in clique["daemons"]] == [
        ("gb200-nvl72-1", 0, "Ready")
    ]
    (spec,) = [s for s in cd_specs(cluster, "gb200-nvl72-1") if channel_minors(s)]
    (node,) = spec["devices"][0]["containerEdits"]["deviceNodes"]
    assert node["path"] == "/dev/nvidia-caps-imex-channels/channel0" and node["minor"] == 0
    events, _ = await client.list_raw(EVENTS, NS)
    failed = [e["message"] for e in events if e.get("reason") == "FailedPrepareDynamicResources"]
    # the prepare waited for the daemon instead of failing and being retried by the kubelet
    assert not [m for m in failed if "IMEX daemon" in m], failed

    await client.delete(PODS, "worker", NS)

    async def released() -> bool:
        return node_label_key(uid) not in await labels(client, "gb200-nvl72-1") and not [
            s for s in cd_specs(cluster, "gb200-nvl72-1") if channel_minors(s)
        ]

    await eventually(released, timeout=20)

    async def daemon_left() -> bool:
        body = await client.get_raw(COMPUTE_DOMAIN_CLIQUES, clique_object_name(uid, clique_id), DRIVER_NS)
        return not body.get("daemons")

    await eventually(daemon_left, timeout=20)  # the daemon pod went with the label and released its index


async def test_all_mode_injects_every_channel(start_cluster: StartCluster) -> None:
    cluster = await start_cluster("gb200-nvl72:1")
    client = cluster.client
    assert client is not None
    await make_domain(client, "wide", allocation_mode="All")
    await client.create(PODS, workload_pod("worker", "wide", "gb200-nvl72-0"), NS)
    await eventually(lambda: _is_running(client, "worker"), timeout=30)
    (spec,) = [s for s in cd_specs(cluster, "gb200-nvl72-0") if channel_minors(s)]
    assert channel_minors(spec) == list(range(2048))


async def _is_running(client: KubeClient, name: str) -> bool:
    return await phase(client, name) == "Running"


async def test_fabric_loss_removes_the_clique_label_and_restores_it(start_cluster: StartCluster) -> None:
    cluster = await start_cluster("gb200-nvl72:1", hardware_poll_seconds=0.05)
    client = cluster.client
    assert client is not None
    clique = await eventually(lambda: _label(client, "gb200-nvl72-0"))
    cluster.simulated["gb200-nvl72-0"].lose_fabric(2)

    async def unlabelled() -> bool:
        return CLIQUE_LABEL not in await labels(client, "gb200-nvl72-0")

    await eventually(unlabelled)
    lost = await watch_until(
        client, EVENTS, lambda e: e.get("reason") == "NVLinkCliqueLost", namespace="default"
    )
    assert "GPU 2" in lost["message"], lost
    cluster.simulated["gb200-nvl72-0"].restore_fabric()
    assert await eventually(lambda: _label(client, "gb200-nvl72-0")) == clique


async def test_daemonset_mode_keeps_a_second_domain_off_the_node(start_cluster: StartCluster) -> None:
    cluster = await start_cluster("gb200-nvl72:1")
    client = cluster.client
    assert client is not None
    await make_domain(client, "first")
    second = await make_domain(client, "second")
    await client.create(PODS, workload_pod("a", "first", "gb200-nvl72-0"), NS)
    await eventually(lambda: _is_running(client, "a"), timeout=30)
    await client.create(PODS, workload_pod("b", "second", "gb200-nvl72-0"), NS)

    async def refused() -> list[str]:
        events, _ = await client.list_raw(EVENTS, NS)
        return [
            e["message"]
            for e in events
            if e.get("reason") == "FailedPrepareDynamicResources" and e["involvedObject"]["name"] == "b"
        ]

    messages = await eventually(refused, timeout=20)
    assert any("already runs the IMEX daemon" in m for m in messages), messages
    assert node_label_key(second) not in await labels(client, "gb200-nvl72-0")  # no second daemon scheduled


async def test_host_managed_domains_share_a_node_on_disjoint_channels(start_cluster: StartCluster) -> None:
    cluster = await start_cluster("gb200-nvl72:1", compute_domain_daemon_mode="host-managed")
    client = cluster.client
    assert client is not None
    await make_domain(client, "left")
    await make_domain(client, "right")
    await client.create(PODS, workload_pod("l", "left", "gb200-nvl72-0"), NS)
    await client.create(PODS, workload_pod("r", "right", "gb200-nvl72-0"), NS)
    await eventually(lambda: _is_running(client, "l"), timeout=30)
    await eventually(lambda: _is_running(client, "r"), timeout=30)
    minors = [channel_minors(s) for s in cd_specs(cluster, "gb200-nvl72-0")]
    assert sorted(minors) == [[0], [1]]


async def test_restart_regenerates_channel_specs_and_gpu_recovery_leaves_them(
    start_cluster: StartCluster,
) -> None:
    cluster = await start_cluster("gb200-nvl72:1")
    client = cluster.client
    assert client is not None
    await make_domain(client, "ring")
    await client.create(PODS, workload_pod("worker", "ring", "gb200-nvl72-0"), NS)
    await eventually(lambda: _is_running(client, "worker"), timeout=30)
    runtime = cluster.runtimes["gb200-nvl72-0"]
    assert runtime.preparer is not None and runtime.compute_domains is not None
    before = cd_specs(cluster, "gb200-nvl72-0")

    gpu_report = await recover(runtime.preparer)  # the GPU driver's start-up: CD specs are not its orphans
    assert gpu_report.orphans_removed == [] and cd_specs(cluster, "gb200-nvl72-0") == before

    for path in (cluster.node_dirs["gb200-nvl72-0"] / "cdi").glob("k8s.compute-domain.nvidia.com-*"):
        path.unlink()  # a reboot wiped /var/run/cdi
    report = await recover(runtime.compute_domains.preparer)
    assert len(report.regenerated) == len(before) and cd_specs(cluster, "gb200-nvl72-0") == before
