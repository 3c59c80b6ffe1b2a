"""The stand-in scheduler filters nodes as kube-scheduler does before DRA: node affinity, taints, allocatable
resources, inter-pod affinity; scheduling gates hold a pod back; what it does not implement is told on the pod.
NVIDIA's multi-node pattern (examples/scheduling/computedomain-spread.yaml) ends with one worker per tray."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterkit import StartCluster, client_of, eventually
from gpudra.cluster.up import EmbeddedCluster
from gpudra.computedomain.clique import CLIQUE_LABEL
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import COMPUTE_DOMAINS, EVENTS, JOBS, NODES, PODS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scheduling"


def pod(name: str, **spec: Any) -> dict[str, Any]:
    containers = spec.pop("containers", [{"name": "c", "image": "busybox"}])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": containers, **spec}}  # fmt: skip


async def node_of(client: KubeClient, name: str) -> str:
    return str((await client.get_raw(PODS, name, "default"))["spec"].get("nodeName") or "")


async def events_of(client: KubeClient, name: str, reason: str) -> list[str]:
    events, _ = await client.list_raw(EVENTS, "default", field_selector=f"involvedObject.name={name}")
    return [e["message"] for e in events if e["reason"] == reason]


@pytest.fixture
async def cluster(start_cluster: StartCluster) -> EmbeddedCluster:
    return await start_cluster("l4x4:3")


async def test_taints_resources_and_affinity_are_filters(cluster: EmbeddedCluster) -> None:
    client = client_of(cluster)
    nodes = ["l4x4-0", "l4x4-1", "l4x4-2"]
    taint = {"key": "dedicated", "value": "batch", "effect": "NoSchedule"}
    for node in nodes[:2]:
        await client.patch(NODES, node, {"spec": {"taints": [taint]}})
    await client.create(PODS, pod("anywhere"), "default")
    assert await eventually(lambda: node_of(client, "anywhere")) == "l4x4-2"  # the untainted node
    tolerant = pod("tolerant", tolerations=[{"key": "dedicated", "operator": "Equal", "value": "batch"}],
                   affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                       {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["l4x4-0"]}]}
                   ]}}})  # fmt: skip
    await client.create(PODS, tolerant, "default")
    assert await eventually(lambda: node_of(client, "tolerant")) == "l4x4-0"

    huge = pod(
        "huge", containers=[{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "500"}}}]
    )
    await client.create(PODS, huge, "default")
    (message,) = await eventually(lambda: events_of(client, "huge", "FailedScheduling"))
    # kube-scheduler v1.34.4 said, in this situation: "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had
    # untolerated taint(s). no new claims to deallocate, preemption: ..." (the stand-in does not preempt)
    assert message == "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint(s)."
    assert await node_of(client, "huge") == ""


async def test_gates_hold_a_pod_and_unimplemented_fields_are_told(cluster: EmbeddedCluster) -> None:
    client = client_of(cluster)
    gated = pod("gated", schedulingGates=[{"name": "example.com/quota"}],
                topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                            "whenUnsatisfiable": "DoNotSchedule",
                                            "labelSelector": {"matchLabels": {"app": "x"}}}])  # fmt: skip
    created = await client.create(PODS, gated, "default")
    (condition,) = created["status"]["conditions"]  # as kube-apiserver, no Event
    assert (condition["reason"], condition["message"]) == (
        "SchedulingGated",
        "Scheduling is blocked due to non-empty scheduling gates",
    )
    assert await node_of(client, "gated") == ""
    await client.patch(PODS, "gated", {"spec": {"schedulingGates": None}}, "default")
    assert await eventually(lambda: node_of(client, "gated"))
    (told,) = await eventually(lambda: events_of(client, "gated", "SchedulingFieldIgnored"))
    assert told.startswith("spec.topologySpreadConstraints: ")


async def test_nvidia_spread_example_puts_one_worker_on_each_tray(start_cluster: StartCluster) -> None:
    cluster = await start_cluster("gb200-nvl72:6")
    client = client_of(cluster)
    domain, job = yaml.safe_load_all((EXAMPLES / "computedomain-spread.yaml").read_text())
    await client.create(COMPUTE_DOMAINS, domain, "default")
    await client.create(JOBS, job, "default")

    async def placed() -> list[str] | None:
        pods, _ = await client.list_raw(PODS, "default", label_selector="app=spread-worker")
        where = [str(p["spec"].get("nodeName") or "") for p in pods]
        return where if len(where) == 4 and all(where) else None

    trays = await eventually(placed, timeout=60)
    assert len(set(trays)) == 4
    cliques = {(await client.get_raw(NODES, tray))["metadata"]["labels"][CLIQUE_LABEL] for tray in trays}
    assert len(cliques) == 1
