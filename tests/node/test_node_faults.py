"""Real nodes under stress, one cluster for the module: a container that claims two GPUs sees exactly those two; a
missing image shows as the kubelet reports it; GPU pods keep running, untouched, through a containerd restart, a
kubelet restart and a ``helm upgrade`` that hands each node over to a new agent; the agent's container killed in a
wave of prepares loses nothing and hands no device to two claims; an agent waits for a GPU's missing device node;
``gpudra sim fault`` reaches the agent's pod."""

from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from _nodekit import (
    FAST_CONTROLLER,
    WORKLOAD,
    admin,
    all_running,
    apply,
    checkpoint,
    claim_of,
    claim_specs,
    container_ids,
    helm,
    injected_nodes,
    pods,
    real_node,
    running,
    smi_report,
    tag_gpudra_image,
)

from clusterkit import eventually, kubectl
from gpudra.cluster.fleet import parse_fleet
from gpudra.cluster.realnode.devices import create_device_nodes
from gpudra.cluster.up import EmbeddedCluster, UpOptions
from gpudra.kube.resources import DAEMONSETS, RESOURCE_CLAIMS, RESOURCE_SLICES

pytestmark = pytest.mark.asyncio(loop_scope="module")
NODES = ("dgx-h100-0", "dgx-h100-1")
TEMPLATE = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: default}
spec:
  spec:
    devices:
      requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]
"""


def gpu_pod(name: str, image: str = WORKLOAD, policy: str = "IfNotPresent") -> str:
    pull = f", imagePullPolicy: {policy}"
    return f"""
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default, labels: {{app: gpu}}}}
spec:
  terminationGracePeriodSeconds: 5
  containers: [{{name: main, image: "{image}"{pull}, resources: {{claims: [{{name: gpu}}]}}}}]
  resourceClaims: [{{name: gpu, resourceClaimTemplateName: one-gpu}}]
"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[EmbeddedCluster]:
    options = UpOptions(
        nodes=parse_fleet("dgx-h100:2", {"dgx-h100"}),
        kubeconfig=tmp_path_factory.mktemp("faults") / "kubeconfig",
        control_plane="kubernetes",
        real_nodes=2,
        controller=FAST_CONTROLLER,
        hardware_poll_seconds=0.25,
    )
    started = EmbeddedCluster(options)
    try:
        await started.start()
        await apply(started, TEMPLATE)
        yield started
    finally:
        await started.stop()


async def delete_gpu_pods(cluster: EmbeddedCluster) -> None:
    """Delete the module's GPU pods; return once they, their claims, CDI specs and checkpoint entries are gone."""
    await kubectl(cluster, "delete", "pod", "-l", "app=gpu", "--wait=false")

    async def released() -> bool:
        claims, _ = await admin(cluster).list_raw(RESOURCE_CLAIMS, "default")
        nodes_clean = all(not checkpoint(cluster, n) and not claim_specs(cluster, n) for n in NODES)
        return not await pods(cluster, "default") and not claims and nodes_clean

    await eventually(released, timeout=120)


async def gpu_pods_running(cluster: EmbeddedCluster, count: int) -> dict[str, dict[str, Any]]:
    async def running() -> dict[str, dict[str, Any]]:
        current = await all_running(cluster, ["default"])
        return current if len(current) == count else {}

    return await eventually(running, timeout=180)


async def held_twice(cluster: EmbeddedCluster) -> list[str]:
    claims, _ = await admin(cluster).list_raw(RESOURCE_CLAIMS, "default")
    held = Counter(
        f"{r['pool']}/{r['device']}"
        for c in claims
        for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])
    )
    return [device for device, count in held.items() if count > 1]


async def test_a_missing_image_shows_in_the_pod_as_the_kubelet_reports_it(cluster: EmbeddedCluster) -> None:
    await apply(cluster, gpu_pod("missing", "localhost/gpudra-missing:1", "Never"))

    async def waiting() -> dict[str, Any] | None:
        pod = (await pods(cluster, "default")).get("default/missing") or {}
        (status,) = (pod.get("status") or {}).get("containerStatuses") or [{}]
        state = (status.get("state") or {}).get("waiting") or {}
        return state if state.get("reason") not in (None, "ContainerCreating") else None

    state = await eventually(waiting, timeout=90)
    assert state["reason"] == "ErrImageNeverPull"
    assert "localhost/gpudra-missing:1" in state["message"]
    await delete_gpu_pods(cluster)


async def test_a_container_that_claims_two_gpus_sees_exactly_those_two(cluster: EmbeddedCluster) -> None:
    two = f"""
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: two-gpus, namespace: default}}
spec:
  spec:
    devices:
      requests: [{{name: gpus, exactly: {{deviceClassName: gpu.nvidia.com, count: 2}}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: two, namespace: default, labels: {{app: gpu}}}}
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - {{name: main, image: "{WORKLOAD}", imagePullPolicy: IfNotPresent, resources: {{claims: [{{name: gpus}}]}}}}
  resourceClaims: [{{name: gpus, resourceClaimTemplateName: two-gpus}}]
"""
    await apply(cluster, two)
    pod = (await gpu_pods_running(cluster, 1))["default/two"]
    uuids, nodes = smi_report(await kubectl(cluster, "logs", "two"))
    claim = await claim_of(cluster, pod, "gpus")
    entry = checkpoint(cluster, pod["spec"]["nodeName"])[claim["metadata"]["uid"]]
    assert len(entry.devices) == 2
    assert sorted(uuids) == sorted(str(d.uuid) for d in entry.devices)
    assert set(nodes) == injected_nodes(cluster, pod["spec"]["nodeName"], claim["metadata"]["uid"], None)
    assert len(nodes) == 2
    await delete_gpu_pods(cluster)


async def test_gpu_pods_keep_running_through_a_containerd_and_a_kubelet_restart(
    cluster: EmbeddedCluster,
) -> None:
    await apply(cluster, gpu_pod("before-a") + gpu_pod("before-b"))
    before = {key: container_ids(pod) for key, pod in (await gpu_pods_running(cluster, 2)).items()}
    agents = {key: container_ids(pod) for key, pod in (await pods(cluster, "gpudra")).items()}
    for name in NODES:
        await real_node(cluster, name).restart_containerd()
    for name in NODES:
        await real_node(cluster, name).restart_kubelet()
    await apply(cluster, gpu_pod("after-a") + gpu_pod("after-b"))
    current = await gpu_pods_running(cluster, 4)
    assert {
        key: container_ids(current[key]) for key in before
    } == before  # the same containers, never restarted
    assert {key: container_ids(pod) for key, pod in (await pods(cluster, "gpudra")).items()} == agents
    for key in ("default/after-a", "default/after-b"):
        log = await kubectl(cluster, "logs", key.split("/")[1])
        assert log.startswith("GPU 0: (UUID: GPU-")
    assert await held_twice(cluster) == []
    await delete_gpu_pods(cluster)


async def test_the_agent_killed_in_a_wave_of_prepares_loses_nothing(cluster: EmbeddedCluster) -> None:
    wave = [f"wave-{i}" for i in range(12)]
    await apply(cluster, "".join(gpu_pod(name) for name in wave))

    async def preparing() -> bool:
        claims, _ = await admin(cluster).list_raw(RESOURCE_CLAIMS, "default")
        return any((c.get("status") or {}).get("allocation") for c in claims)

    await eventually(preparing, timeout=60)
    for name in NODES:
        (agent,) = (await real_node(cluster, name).crictl("ps", "--name", "agent", "-q")).split()
        await real_node(cluster, name).crictl("stop", "--timeout", "0", agent)
    current = await gpu_pods_running(cluster, len(wave))
    restarts = [
        ids["agent"][1]
        for ids in map(container_ids, (await pods(cluster, "gpudra")).values())
        if "agent" in ids
    ]
    assert len(restarts) == 2 and all(r >= 1 for r in restarts)  # each agent was killed, and started again
    assert await held_twice(cluster) == []
    for name in NODES:
        on_node = [p for p in current.values() if p["spec"]["nodeName"] == name]
        prepared = {(await claim_of(cluster, p, "gpu"))["metadata"]["uid"] for p in on_node}
        assert set(checkpoint(cluster, name)) == prepared
        assert len(claim_specs(cluster, name)) == len(prepared)
    await delete_gpu_pods(cluster)


async def test_helm_upgrade_to_a_new_tag_hands_each_node_over_without_draining(
    cluster: EmbeddedCluster,
) -> None:
    for name in NODES:
        upgraded = await tag_gpudra_image(cluster, name, "upgrade")
    await apply(cluster, gpu_pod("long-a") + gpu_pod("long-b"))
    before = {key: container_ids(pod) for key, pod in (await gpu_pods_running(cluster, 2)).items()}
    old_agents = set(await pods(cluster, "gpudra"))
    await helm(cluster, "upgrade", "--reuse-values", "--set", "image.tag=upgrade")

    async def rolled() -> bool:
        ds = await admin(cluster).get_raw(DAEMONSETS, "gpudra-agent", "gpudra")
        status = ds.get("status") or {}
        done = status.get("observedGeneration") == ds["metadata"]["generation"] and (
            status.get("updatedNumberScheduled") == status.get("numberAvailable") == len(NODES)
        )
        agents = {k: p for k, p in (await pods(cluster, "gpudra")).items() if "gpudra-agent-" in k}
        return done and len(agents) == len(NODES) and not set(agents) & old_agents

    await eventually(rolled, timeout=180)
    agents = [p for k, p in (await pods(cluster, "gpudra")).items() if "gpudra-agent-" in k]
    assert {c["image"] for p in agents for c in p["spec"]["containers"]} == {upgraded}
    current = await all_running(cluster, ["default"])
    assert {key: container_ids(current[key]) for key in before} == before  # not drained, not restarted
    await apply(cluster, gpu_pod("after-upgrade"))
    await gpu_pods_running(cluster, 3)  # the new agents prepare
    await delete_gpu_pods(cluster)  # ... and unprepare what the old ones prepared
    for name in NODES:
        assert checkpoint(cluster, name) == {}


async def test_an_agent_whose_gpus_device_node_is_missing_waits_for_it_not_ready(
    cluster: EmbeddedCluster,
) -> None:
    """The chart mounts the host's driver root into the agent: started where a GPU's device node is missing, the
    agent's pod is not Ready and its log names the node as containerd would look for it; once the node is there,
    the agent goes on by itself."""
    node = real_node(cluster, "dgx-h100-1")
    missing = node.dirs.driver_root / "dev" / "nvidia3"
    missing.unlink()
    (agent,) = (await node.crictl("ps", "--name", "agent", "-q")).split()
    await node.crictl("stop", "--timeout", "0", agent)

    async def agent_pod() -> tuple[str, dict[str, Any]]:
        (found,) = [
            (k.split("/")[1], p)
            for k, p in (await pods(cluster, "gpudra")).items()
            if "gpudra-agent-" in k and p["spec"]["nodeName"] == "dgx-h100-1"
        ]
        return found

    async def waiting() -> str | None:
        name, pod = await agent_pod()
        if running(pod):
            return None
        log = await kubectl(cluster, "logs", "-n", "gpudra", name, "-c", "agent")
        return log if "waiting for the GPUs' device nodes" in log else None

    log = await eventually(waiting, timeout=120)
    assert "the node has no /run/nvidia/driver/dev/nvidia3" in log
    create_device_nodes(node.dirs.driver_root, ["/dev/nvidia3"])

    async def ready() -> bool:
        return running((await agent_pod())[1])

    await eventually(ready, timeout=120)


async def test_gpudra_sim_fault_reaches_the_agent_in_its_pod(cluster: EmbeddedCluster) -> None:
    """The simulated GPUs of a real node live in its agent's container: a fault reaches them through the chart's
    fault inbox, and the agent there taints the device as it would for real hardware. (Last: the taint stays for
    the recovery period.)"""
    env = {**os.environ, "KUBECONFIG": str(cluster.options.kubeconfig)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpudra", "sim", "fault", "dgx-h100-1", "gpu-7", "xid", "79",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0 and "XID 79" in out.decode(), out.decode()

    async def tainted() -> list[dict[str, Any]]:
        slices, _ = await admin(cluster).list_raw(RESOURCE_SLICES)
        return [
            taint
            for s in slices
            if s["spec"].get("nodeName") == "dgx-h100-1"
            for d in s["spec"].get("devices") or []
            if d["name"] == "gpu-7"
            for taint in d.get("taints") or []
        ]

    (taint,) = await eventually(tainted, timeout=60)
    assert (taint["key"], taint["value"]) == ("gpu.nvidia.com/xid", "79")
