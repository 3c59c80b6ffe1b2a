"""The fault run: 200 pods created and deleted on the real control plane while node agents (each a process of its
own, as its DaemonSet pod) are killed with SIGKILL at 20 random points and started again. At the end no CDI spec,
checkpoint entry or MIG instance is left over, no device was ever held twice, and every pod ran or was pending
with a reason. ``GPUDRA_FAULT_SEED=<n>`` replays a run."""

from __future__ import annotations

import asyncio
import os
import random
from collections import Counter

import pytest
from _realkit import (
    StartKubernetes,
    claims,
    events_of,
    held_devices,
    phase,
    pods,
)

from clusterkit import checkpoint_claims, claim_specs, eventually, kubectl
from gpudra.cluster.up import EmbeddedCluster

WAVES, PER_WAVE, KILLS = 4, 50, 20
TEMPLATES = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-l4, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          selectors: [{cel: {expression: 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA L4"'}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-1g, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: mig
        exactly:
          deviceClassName: mig.nvidia.com
          selectors: [{cel: {expression: 'device.attributes["gpu.nvidia.com"].profile == "1g.5gb"'}}]
"""


def wave(number: int) -> str:
    return "\n---\n".join(
        f"""
apiVersion: v1
kind: Pod
metadata: {{name: w{number}-{i:02d}, namespace: default, labels: {{wave: "{number}"}}}}
spec:
  containers: [{{name: main, image: cuda, resources: {{claims: [{{name: gpu}}]}}}}]
  resourceClaims: [{{name: gpu, resourceClaimTemplateName: {"one-l4" if i % 2 else "one-1g"}}}]
"""
        for i in range(PER_WAVE)
    )


def mig_instances(cluster: EmbeddedCluster, node: str) -> int:
    gpus = cluster.simulated_gpus(node)
    gpus.nvmlInit()
    return sum(len(gpus.gpu(i).gpu_instances) for i in range(gpus.nvmlDeviceGetCount()))


async def kill_agents(cluster: EmbeddedCluster, rng: random.Random, counts: Counter[str]) -> None:
    """SIGKILL a random node's agent at random moments, start it again after a random pause."""
    for _ in range(KILLS):
        await asyncio.sleep(rng.uniform(0.3, 2.5))
        node = rng.choice(sorted(cluster.agent_processes))
        process = cluster.agent_processes[node]
        await process.kill()
        counts["agent kills"] += 1
        await asyncio.sleep(rng.uniform(0.0, 1.0))
        await process.start()


def agent_trouble(cluster: EmbeddedCluster, lines: int = 12) -> str:
    """The last warnings and errors of each node's agent (its log goes with the test's directory)."""
    parts = []
    for node in sorted(cluster.agent_processes):
        path = cluster.node_dirs[node] / "agent.log"
        text = path.read_text(errors="replace").splitlines() if path.exists() else []
        trouble = [line for line in text if "[warning" in line or "[error" in line or "Traceback" in line]
        parts.append(f"--- {node} agent ({len(text)} lines), its last warnings and errors:")
        parts += [line[:400] for line in trouble[-lines:]]
    return "\n".join(parts)


async def diagnosis(cluster: EmbeddedCluster, prefix: str) -> str:
    """What a failed wait saw: the pods still bound and not running with their last event, what each node's
    agent still holds, and the agents' last warnings."""
    parts = []
    for name, pod in sorted((await pods(cluster)).items()):
        if not name.startswith(prefix) or phase(pod) == "Running" or not pod["spec"].get("nodeName"):
            continue
        events = sorted(await events_of(cluster, name), key=lambda e: str(e.get("lastTimestamp") or ""))
        last = f"{events[-1]['reason']}: {events[-1]['message']}"[:400] if events else "no event"
        deleting = " (deleting)" if pod["metadata"].get("deletionTimestamp") else ""
        parts.append(f"{name} on {pod['spec']['nodeName']}{deleting}, {phase(pod)}: {last}")
    for node in sorted(cluster.agent_processes):
        entries = checkpoint_claims(cluster, node)
        held = [f"{e.name} {e.state}" for e in entries.values()]
        parts.append(f"{node}: checkpoint {held}, MIG instances {mig_instances(cluster, node)}")
    return "\n".join([*parts, agent_trouble(cluster)])


async def settled_wave(cluster: EmbeddedCluster, number: int, counts: Counter[str]) -> None:
    """Every pod of the wave is Running, or unscheduled with the scheduler's reason."""

    async def check() -> bool:
        current = {n: p for n, p in (await pods(cluster)).items() if n.startswith(f"w{number}-")}
        if len(current) != PER_WAVE:
            return False
        for name, pod in current.items():
            if phase(pod) == "Running":
                continue
            if pod["spec"].get("nodeName"):
                return False  # bound: its kubelet still prepares it (or retries after an agent restart)
            if not any(e["reason"] == "FailedScheduling" for e in await events_of(cluster, name)):
                return False
        return True

    try:
        await eventually(check, timeout=180, what=f"wave {number} settled")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{await diagnosis(cluster, f'w{number}-')}") from None
    current = {n: p for n, p in (await pods(cluster)).items() if n.startswith(f"w{number}-")}
    counts["pods running"] += sum(1 for p in current.values() if phase(p) == "Running")
    counts["pods pending with a reason"] += sum(1 for p in current.values() if phase(p) != "Running")
    held = held_devices(await claims(cluster))
    assert all(n == 1 for n in held.values()), f"devices held twice: {[d for d, n in held.items() if n > 1]}"
    for node in cluster.agent_processes:
        prepared = [
            (d.pool_name, d.device_name) for e in checkpoint_claims(cluster, node).values() for d in e.devices
        ]
        assert len(prepared) == len(set(prepared)), f"{node} prepared a device for two claims"


# Four waves of 50 pods with 20 agent restarts: 1.5 to 3 minutes on an idle 2-core machine, over 5 when the machine
# is shared. Each wave has its own limits (settled in 180 s, deleted in 180 s); this one only catches a hang.
@pytest.mark.timeout(600)
async def test_two_hundred_pods_while_agents_are_killed(start_kubernetes: StartKubernetes) -> None:
    seed = int(os.environ.get("GPUDRA_FAULT_SEED") or random.SystemRandom().randrange(1 << 30))
    print(f"fault run seed {seed} (replay: GPUDRA_FAULT_SEED={seed})")
    rng = random.Random(seed)
    cluster = await start_kubernetes("dgx-a100:2,l4x4:2", agent_processes=True, dynamic_mig=True)
    await kubectl(cluster, "apply", "-f", "-", stdin=TEMPLATES)
    counts: Counter[str] = Counter()
    killer = asyncio.create_task(kill_agents(cluster, rng, counts))
    try:
        for number in range(WAVES):
            await kubectl(cluster, "apply", "-f", "-", stdin=wave(number))
            counts["pods created"] += PER_WAVE
            await settled_wave(cluster, number, counts)
            try:
                await kubectl(
                    cluster,
                    "delete",
                    "pods",
                    "-l",
                    f"wave={number}",
                    "--wait=true",
                    "--timeout=180s",
                    timeout=200,
                )
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{await diagnosis(cluster, f'w{number}-')}") from None
        await killer
    finally:
        killer.cancel()
    for process in cluster.agent_processes.values():
        if not process.running:
            await process.start()

    async def nothing_left() -> bool:
        return not await claims(cluster) and all(
            not checkpoint_claims(cluster, n)
            and not claim_specs(cluster, n)
            and not mig_instances(cluster, n)
            for n in cluster.agent_processes
        )

    try:
        await eventually(nothing_left, timeout=60, what="nothing left")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{await diagnosis(cluster, 'w')}") from None
    counts["agent starts"] = sum(p.starts for p in cluster.agent_processes.values())
    print("fault run:", ", ".join(f"{key} {value}" for key, value in sorted(counts.items())))
    assert counts["agent kills"] == KILLS
    assert counts["pods created"] == WAVES * PER_WAVE
    assert counts["pods running"] + counts["pods pending with a reason"] == WAVES * PER_WAVE
