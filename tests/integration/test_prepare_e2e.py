"""End to end in the embedded cluster: a bound pod's claim is prepared by the stand-in kubelet over the agent's
real gRPC sockets, the pod runs, and deleting the pod unprepares the claim."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from _prepare_kit import HeldStatusWrites

from clusterkit import StartCluster, eventually
from gpudra.agent.kubeletplugin import ClaimRef
from gpudra.cluster.up import EmbeddedCluster
from gpudra.errors import ConflictError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import EVENTS, NAMESPACES, PODS, RESOURCE_CLAIMS
from podexplainkit import check_unprepared_claim_is_explained, check_unregistered_driver_is_explained

NODE = "l4x4-0"
NS = "e2e"


async def started(
    start_cluster: StartCluster, web_port: int | None = None, **agent_settings: Any
) -> tuple[EmbeddedCluster, KubeClient]:
    """One l4x4 node, its cluster's client and the test's namespace (and the web view, on ``web_port``)."""
    cluster = await start_cluster(
        "l4x4:1", hardware_poll_seconds=0.1, agent_settings=agent_settings, web_port=web_port
    )
    client = cluster.client
    assert client is not None
    await client.apply_object(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return cluster, client


async def prepare_failures(client: KubeClient) -> list[str]:
    """The messages of the FailedPrepareDynamicResources Events in the test's namespace."""
    items: list[dict[str, Any]]
    items, _ = await client.list_raw(EVENTS, NS)
    return [e["message"] for e in items if e["reason"] == "FailedPrepareDynamicResources"]


async def one_gpu_claim(client: KubeClient, name: str) -> dict[str, Any]:
    """A claim of one GPU in the test's namespace, as created."""
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
        },
    }
    return await client.create(RESOURCE_CLAIMS, body, NS)


async def test_bound_pod_gets_its_claim_prepared_and_released(start_cluster: StartCluster) -> None:
    cluster, client = await started(start_cluster)
    claim = await one_gpu_claim(client, "one-gpu")
    pod = await client.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "trainer", "namespace": NS},
            "spec": {
                "schedulerName": "test-binds-it-itself",
                "containers": [{"name": "main", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "one-gpu"}],
            },
        },
        NS,
    )
    # allocate (as kube-scheduler would) unless the control plane already did
    current = await client.get_raw(RESOURCE_CLAIMS, "one-gpu", NS)
    if not (current.get("status") or {}).get("allocation"):
        current["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-2"}
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": "trainer", "uid": pod["metadata"]["uid"]}],
        }
        with contextlib.suppress(ConflictError):  # the control plane allocated it meanwhile
            await client.replace(RESOURCE_CLAIMS, current, subresource="status")
    if not (await client.get_raw(PODS, "trainer", NS))["spec"].get("nodeName"):
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "trainer", "namespace": NS},
            "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
        }
        with contextlib.suppress(ConflictError):  # the control plane bound it meanwhile
            await client.create_subresource(PODS, "trainer", "binding", binding, NS)
    node = (await client.get_raw(PODS, "trainer", NS))["spec"]["nodeName"]
    preparer = cluster.runtimes[node].preparer
    assert preparer is not None
    specs = preparer.effects.specs
    uid = claim["metadata"]["uid"]

    async def running() -> bool:
        return bool((await client.get_raw(PODS, "trainer", NS)).get("status", {}).get("phase") == "Running")

    await eventually(running, 20.0)
    spec = specs.read(uid)
    assert spec is not None
    assert specs.directory.is_relative_to(cluster.node_dirs[node])

    async def status_entries() -> list[dict[str, Any]]:  # written after the agent answered the kubelet
        claim_now = await client.get_raw(RESOURCE_CLAIMS, "one-gpu", NS)
        return list((claim_now.get("status") or {}).get("devices") or [])

    (status,) = await eventually(status_entries, 20.0)
    assert status["conditions"][0]["status"] == "True"
    assert f"NVIDIA_VISIBLE_DEVICES={status['data']['uuid']}" in spec["containerEdits"]["env"]

    await client.delete(PODS, "trainer", NS)

    async def released() -> bool:
        return specs.read(uid) is None

    await eventually(released, 20.0)


async def test_pod_waits_with_an_event_until_its_claim_is_reserved(start_cluster: StartCluster) -> None:
    _, client = await started(start_cluster)
    await client.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "orphan", "namespace": NS},
            "spec": {
                "nodeName": NODE,
                "containers": [{"name": "main", "image": "cuda"}],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "does-not-exist"}],
            },
        },
        NS,
    )

    await eventually(lambda: prepare_failures(client), 20.0)
    assert (await client.get_raw(PODS, "orphan", NS)).get("status", {}).get("phase") != "Running"


async def test_an_agent_without_mps_support_refuses_an_mps_claim_and_the_pod_says_why(
    start_cluster: StartCluster,
) -> None:
    cluster, client = await started(start_cluster, web_port=0, mps_support=False)
    await check_unprepared_claim_is_explained(cluster, NODE)
    assert (await client.get_raw(PODS, "mps-user", "default")).get("status", {}).get("phase") != "Running"


async def test_a_pod_whose_node_has_no_agent_says_what_the_kubelet_says(start_cluster: StartCluster) -> None:
    cluster = await start_cluster("l4x4:1", agent_processes=True, hardware_poll_seconds=0.1)
    await check_unregistered_driver_is_explained(cluster, NODE)


async def test_an_agent_stops_only_after_its_claim_status_writes(
    start_cluster: StartCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The status entry is written after the kubelet's answer; an agent that stops (or hands the node over)
    first finishes those writes, so none comes after another agent took the node."""
    cluster, client = await started(start_cluster)
    runtime, agent_client = cluster.runtimes[NODE], cluster.agent_clients[NODE]
    assert runtime.preparer is not None
    claim = await one_gpu_claim(client, "late-status")
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-1"}]
            }
        },
        "reservedFor": [{"resource": "pods", "name": "somebody", "uid": "pod-somebody"}],
    }
    await client.replace(RESOURCE_CLAIMS, claim, subresource="status")
    writes = HeldStatusWrites(agent_client, monkeypatch)
    ref = ClaimRef(namespace=NS, uid=claim["metadata"]["uid"], name="late-status")
    assert (await runtime.preparer.prepare([ref]))[ref.uid].error == ""
    await asyncio.wait_for(writes.waiting.wait(), timeout=30)
    (agent,) = [
        t for t in asyncio.all_tasks() if getattr(t.get_coro(), "__qualname__", "") == "AgentRuntime.run"
    ]
    agent.cancel()
    done, _ = await asyncio.wait({agent}, timeout=1.0)  # stopping, it waits for the write
    assert not done and runtime.role.active.is_set()
    writes.release.set()
    await asyncio.gather(agent, return_exceptions=True)
    assert not runtime.role.active.is_set()
    (entry,) = (await client.get_raw(RESOURCE_CLAIMS, "late-status", NS))["status"]["devices"]
    assert entry["device"] == "gpu-1"
