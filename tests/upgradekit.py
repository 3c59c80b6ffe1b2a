"""Upgrading the node agent without draining, run the same on the embedded cluster
(tests/integration/test_agent_upgrade.py) and on the real control plane (tests/kubernetes/test_real_agent_upgrade.py):
the new agent starts beside the old one, the kubelet's calls move to it, the old one finishes what it has in flight
and stops; pods keep running and new ones start meanwhile."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from clusterkit import eventually, kubectl
from gpudra.agent.checkpoint import ClaimEntry, decode_checkpoint
from gpudra.agent.handover import INSTANCES, TAKEOVER
from gpudra.agent.kubeletplugin import ClaimRef
from gpudra.agent.kubeletplugin.kubelet_client import KubeletClient
from gpudra.agent.runtime import AgentRuntime
from gpudra.cluster.up import EmbeddedCluster, pod_uid
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.hardware.simulated.fake_nvml import FakeNvml
from gpudra.kube.resources import NODES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES


def gpu_pod(name: str) -> str:
    return f"""
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: {name}, namespace: default}}
spec:
  devices:
    requests: [{{name: gpu, exactly: {{deviceClassName: gpu.nvidia.com}}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  containers: [{{name: main, image: cuda, resources: {{claims: [{{name: gpu}}]}}}}]
  resourceClaims: [{{name: gpu, resourceClaimName: {name}}}]
"""


async def all_running(cluster: EmbeddedCluster, names: list[str], timeout: float = 60) -> None:
    assert cluster.client is not None
    client = cluster.client

    async def check() -> bool:
        items, _ = await client.list_raw(PODS, "default")
        phases = {p["metadata"]["name"]: (p.get("status") or {}).get("phase") for p in items}
        return all(phases.get(name) == "Running" for name in names)

    await eventually(check, timeout=timeout)


def checkpoint(cluster: EmbeddedCluster, node: str) -> dict[str, ClaimEntry]:
    path = cluster.node_dirs[node] / "state" / "checkpoint.json"
    claims, _ = decode_checkpoint(path.read_bytes(), node=node, driver="gpu.nvidia.com", path=str(path))
    return claims


def cdi_claims(cluster: EmbeddedCluster, node: str) -> set[str]:
    directory = cluster.node_dirs[node] / "cdi"
    prefix = "k8s.gpu.nvidia.com-claim_"
    return {p.stem.removeprefix(prefix) for p in directory.glob(f"{prefix}*.json")}


def sockets(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir() if p.is_socket()} if directory.is_dir() else set()


async def claim_uids(cluster: EmbeddedCluster, names: list[str]) -> dict[str, str]:
    assert cluster.client is not None
    return {
        name: (await cluster.client.get_raw(RESOURCE_CLAIMS, name, "default"))["metadata"]["uid"]
        for name in names
    }


def _asked_by(state: Path) -> str:
    """The agent instance that last asked for the node ("" before any did)."""
    try:
        return (state / TAKEOVER).read_text().strip()
    except FileNotFoundError:
        return ""


async def a_rolling_update_hands_over_without_draining(cluster: EmbeddedCluster, node: str) -> None:
    """Two pods run; the agent process is rolled while four more pods are created; afterwards every pod runs, each
    claim is prepared once (one checkpoint entry, one CDI spec), only the new agent's sockets are left, the node's
    slices stayed published, and a pod from before the update is unprepared by the new agent."""
    assert cluster.client is not None
    await kubectl(cluster, "apply", "-f", "-", stdin=gpu_pod("before-0") + "---" + gpu_pod("before-1"))
    await all_running(cluster, ["before-0", "before-1"])
    old = cluster.agent_processes[node]
    state = old.settings.state_path
    announced = set((state / INSTANCES).iterdir())
    roll = asyncio.create_task(cluster.roll_agent(node))
    # one pod at each step of the hand-over: before the new instance starts, once it has announced itself, once it
    # has asked for the node, and once the old one is gone
    steps = {
        "during-0": lambda: True,
        "during-1": lambda: set((state / INSTANCES).iterdir()) - announced,
        "during-2": lambda: _asked_by(state) not in ("", old.settings.instance_id),
        "during-3": roll.done,
    }
    for name, reached in steps.items():
        await eventually(reached, 60, what=f"the hand-over's step for {name}")
        await kubectl(cluster, "apply", "-f", "-", stdin=gpu_pod(name))
    during = list(steps)
    new = await roll
    names = ["before-0", "before-1", *during]
    await all_running(cluster, names)
    uids = await claim_uids(cluster, names)
    entries = checkpoint(cluster, node)
    assert {uid: entries[uid].state for uid in uids.values()} == dict.fromkeys(
        uids.values(), "PrepareCompleted"
    )
    assert cdi_claims(cluster, node) == set(uids.values())
    plugins = cluster.node_dirs[node] / "plugins"
    registry = cluster.node_dirs[node] / "registry"
    assert sockets(plugins) == {f"dra-{new.settings.instance_id}.sock"}
    assert f"gpu.nvidia.com-{old.settings.instance_id}-reg.sock" not in sockets(registry)
    assert f"gpu.nvidia.com-{new.settings.instance_id}-reg.sock" in sockets(registry)
    node_body = await cluster.client.get_raw(NODES, node)
    assert node_body["metadata"]["labels"]["gpudra.dev/resourceslices-published"] == "true"
    slices, _ = await cluster.client.list_raw(RESOURCE_SLICES, field_selector=f"spec.nodeName={node}")
    assert sum(len(s["spec"].get("devices") or []) for s in slices) == 8
    await kubectl(cluster, "delete", "pod", "before-0", "--wait=false")

    async def unprepared() -> bool:
        return uids["before-0"] not in cdi_claims(cluster, node) and uids["before-0"] not in checkpoint(
            cluster, node
        )

    await eventually(unprepared, timeout=30)


MIG_POD = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: small, namespace: default}
spec:
  devices:
    requests:
    - name: mig
      exactly:
        deviceClassName: mig.nvidia.com
        selectors: [{cel: {expression: 'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'}}]
---
apiVersion: v1
kind: Pod
metadata: {name: small, namespace: default}
spec:
  containers: [{name: main, image: cuda, resources: {claims: [{name: mig}]}}]
  resourceClaims: [{name: mig, resourceClaimName: small}]
"""


def mig_count(fake: FakeNvml, node: str) -> int:
    return sum(len(gpu.mig_devices) for gpu in NvmlBackend(node, nvml=fake).read_inventory().gpus)


async def a_prepare_in_flight_at_the_handover_happens_once(cluster: EmbeddedCluster, node: str) -> None:
    """The old agent is creating a dynamic MIG instance for a pod when the new agent starts; the kubelet, as after
    a timed-out call, asks the new agent for the same claim. The new agent takes over only once the old one has
    finished; its answer comes from the checkpoint: one MIG instance, the same CDI ids, and the old agent refuses
    what comes to it afterwards. The new agent then unprepares the pod's claim."""
    assert cluster.client is not None
    fake = cluster.simulated[node]
    old = cluster.runtimes[node]
    release = threading.Event()
    create = fake.nvmlDeviceCreateGpuInstanceWithPlacement

    def slow_create(handle: Any, profile_id: int, placement: Any) -> Any:
        release.wait(30)
        return create(handle, profile_id, placement)

    # the ignore below: a slow call injected into this one fake NVML
    fake.nvmlDeviceCreateGpuInstanceWithPlacement = slow_create  # type: ignore[method-assign]
    await kubectl(cluster, "apply", "-f", "-", stdin=MIG_POD)
    uid = (await claim_uids(cluster, ["small"]))["small"]
    await eventually(
        lambda: uid in old.preparer.store.claims() if old.preparer else False,
        timeout=60,
    )
    settings = old.settings.model_copy(update={"instance_id": pod_uid()})
    new = AgentRuntime(
        settings,
        NvmlBackend(node, nvml=fake),
        cluster.agent_clients[node],
        cluster.metrics,
        locks=cluster.handover_locks,  # the cluster's in-process agents share its locks
    )
    task = asyncio.create_task(new.run())
    try:
        assert new.plugin is not None
        await eventually(lambda: new.plugin is not None and new.plugin.serving)
        kubelet = KubeletClient(new.plugin.registration_socket)
        await kubelet.register()
        retried = asyncio.create_task(kubelet.prepare([ClaimRef(namespace="default", uid=uid, name="small")]))
        await eventually(old.role.yielding.is_set, what="the old agent seeing the new one ask for the node")
        done, _ = await asyncio.wait({retried}, timeout=10 * new.role.poll)  # ten of the new agent's polls
        assert (
            not done and not new.role.active.is_set()
        )  # both wait: the old on the hardware, the new for the node
        release.set()
        answer = (await asyncio.wait_for(retried, 30))[uid]
        assert not answer.error and answer.devices
        await all_running(cluster, ["small"])
        assert mig_count(fake, node) == 1
        assert old.handed_over and new.role.active.is_set()
        entry = checkpoint(cluster, node)[uid]
        assert entry.state == "PrepareCompleted" and len(entry.mig_instances_created) == 1
        assert [list(d.cdi_device_ids) for d in answer.devices] == [d.cdi_device_ids for d in entry.devices]
        assert old.plugin is not None
        refused = KubeletClient(old.plugin.registration_socket)
        await refused.register()
        late = (await refused.prepare([ClaimRef(namespace="default", uid=uid, name="small")]))[uid]
        assert "handed the node over" in late.error
        await refused.close()
        await kubelet.close()
        await kubectl(cluster, "delete", "pod", "small", "--wait=false")

        async def destroyed() -> bool:
            return mig_count(fake, node) == 0 and uid not in checkpoint(cluster, node)

        await eventually(destroyed, timeout=30)
    finally:
        release.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
