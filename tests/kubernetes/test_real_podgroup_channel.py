"""A ComputeDomain's channel claim scoped to a PodGroup, on kube-apiserver 1.37 (or 1.36) with
DRAWorkloadResourceClaims (and GenericWorkload, which serves the PodGroup API: scheduling.k8s.io/v1beta1 in 1.37,
v1alpha2 in 1.36) on every component.

The domain asks for it with the annotation ``computedomain.gpudra.dev/channel-scope: PodGroup``; the PodGroup
names the domain's claim template, and its pods name the PodGroup. kube-controller-manager then makes one claim for
the whole group, kube-scheduler reserves it for the PodGroup (not for each pod: ``reservedFor`` holds at most 256
entries), and each node's agent prepares the domain's channel for the pods placed there."""

from __future__ import annotations

import os
from typing import Any

import pytest
from _realkit import MINOR, StartKubernetes, admin, claims, events_of, needs_minor, phase, pods

from clusterkit import eventually, kubectl
from gpudra.cluster.apiserver.versions import OPTIONAL_GATES
from gpudra.computedomain.names import OBJECT_LABEL
from gpudra.kube.resources import COMPUTE_DOMAINS, RESOURCE_SLICES

GATES = ("GenericWorkload", "DRAWorkloadResourceClaims")
WORKERS = int(os.environ.get("GPUDRA_PODGROUP_WORKERS", "260"))
"""More than the 256 entries a claim's reservedFor can hold."""
NODES = 4

DOMAIN = """
apiVersion: resource.nvidia.com/v1beta1
kind: ComputeDomain
metadata:
  name: train
  namespace: default
  annotations: {computedomain.gpudra.dev/channel-scope: PodGroup}
spec:
  channel: {resourceClaimTemplate: {name: train-channel}}
"""

POD_GROUP_VERSION = "v1beta1" if MINOR >= 37 else "v1alpha2"
"""The PodGroup API's version: v1beta1 from 1.37, v1alpha2 in 1.36 (k8s.io/api scheduling), the same spec."""
POD_GROUP = f"""
apiVersion: scheduling.k8s.io/{POD_GROUP_VERSION}
kind: PodGroup
metadata: {{name: train, namespace: default}}
spec:
  schedulingPolicy: {{basic: {{}}}}
  resourceClaims: [{{name: channel, resourceClaimTemplateName: train-channel}}]
"""


def job(count: int) -> str:
    """``count`` workers of the PodGroup, spread evenly over the nodes (which one claim of a node's own channel
    could never allow: it would pin every pod to that node)."""
    return f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: train, namespace: default}}
spec:
  completions: {count}
  parallelism: {count}
  template:
    metadata: {{labels: {{app: train}}}}
    spec:
      restartPolicy: Never
      schedulingGroup: {{podGroupName: train}}
      topologySpreadConstraints:
      - {{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule,
          labelSelector: {{matchLabels: {{app: train}}}}}}
      containers:
      - name: worker
        image: cuda
        resources: {{claims: [{{name: channel}}]}}
      resourceClaims: [{{name: channel, resourceClaimTemplateName: train-channel}}]
"""


@needs_minor(
    OPTIONAL_GATES["DRAWorkloadResourceClaims"], "no DRAWorkloadResourceClaims feature gate to turn on"
)
@pytest.mark.timeout(900)
async def test_one_podgroup_claim_serves_more_workers_than_reserved_for_can_list(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes(f"gb200-nvl72:{NODES}", feature_gates_on=GATES)
    await kubectl(cluster, "apply", "-f", "-", stdin=DOMAIN)
    await kubectl(cluster, "apply", "-f", "-", stdin=POD_GROUP)
    await kubectl(cluster, "apply", "-f", "-", stdin=job(WORKERS))

    async def all_running() -> dict[str, Any]:
        current = {n: p for n, p in (await pods(cluster)).items() if n.startswith("train-")}
        done = len(current) == WORKERS and all(phase(p) == "Running" for p in current.values())
        return current if done else {}

    running = await eventually(all_running, timeout=600, interval=2)
    # the controller found the PodGroup API of this version (1.36 serves v1alpha2 only) and did not warn
    assert not [e for e in await events_of(cluster, "train") if e["reason"] == "PodGroupsNotServed"]
    per_node: dict[str, int] = {}
    for pod in running.values():
        per_node[pod["spec"]["nodeName"]] = per_node.get(pod["spec"]["nodeName"], 0) + 1
    assert len(per_node) == NODES and max(per_node.values()) - min(per_node.values()) <= 1, per_node

    # one claim for the whole group, reserved for the PodGroup, and every pod runs with it
    domain_claims = {
        name: c
        for name, c in (await claims(cluster)).items()
        if (c["metadata"].get("labels") or {}).get(OBJECT_LABEL)
    }
    assert len(domain_claims) == 1, sorted(domain_claims)
    ((name, claim),) = domain_claims.items()
    assert [(r.get("apiGroup"), r["resource"], r["name"]) for r in claim["status"]["reservedFor"]] == [
        ("scheduling.k8s.io", "podgroups", "train")
    ]
    assert claim["metadata"]["ownerReferences"][0]["kind"] == "PodGroup"
    held = {
        s["resourceClaimName"]
        for p in running.values()
        for s in p["status"].get("resourceClaimStatuses") or []
    }
    assert held == {name}
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result["pool"] == f"computedomain-{claim['metadata']['labels'][OBJECT_LABEL]}"

    async def ready_nodes() -> list[str]:
        status = (await admin(cluster).get_raw(COMPUTE_DOMAINS, "train", "default")).get("status") or {}
        nodes = sorted(n["name"] for n in status.get("nodes") or [])
        return nodes if status.get("status") == "Ready" and len(nodes) == NODES else []

    assert await eventually(ready_nodes, timeout=120) == sorted(per_node)

    # deleting the domain removes its channel's ResourceSlice with the rest
    await kubectl(cluster, "delete", "computedomain", "train", "--wait=true", "--timeout=60s")
    slices, _ = await admin(cluster).list(RESOURCE_SLICES, label_selector=OBJECT_LABEL)
    assert slices == []


@needs_minor(
    OPTIONAL_GATES["DRAWorkloadResourceClaims"], "no DRAWorkloadResourceClaims feature gate to turn on"
)
@pytest.mark.timeout(600)
async def test_a_real_kubelet_runs_the_groups_pods_on_the_podgroup_claim(
    start_kubernetes: StartKubernetes,
) -> None:
    """The 1.37 kubelet with the gates on starts a pod whose claim is reserved for its PodGroup (not for the pod)
    and asks the node's agent to prepare the domain's channel there. Host-managed IMEX (the agent is the node's
    daemon): no daemon pod has to run under the fake container runtime."""
    cluster = await start_kubernetes(
        "gb200-nvl72:2", feature_gates_on=GATES, real_kubelets=2, compute_domain_daemon_mode="host-managed"
    )
    await kubectl(cluster, "apply", "-f", "-", stdin=DOMAIN)
    await kubectl(cluster, "apply", "-f", "-", stdin=POD_GROUP)
    await kubectl(cluster, "apply", "-f", "-", stdin=job(4))

    async def all_running() -> dict[str, Any]:
        current = {n: p for n, p in (await pods(cluster)).items() if n.startswith("train-")}
        done = len(current) == 4 and all(phase(p) == "Running" for p in current.values())
        return current if done else {}

    running = await eventually(all_running, timeout=300, interval=1)
    assert sorted({p["spec"]["nodeName"] for p in running.values()}) == sorted(cluster.real_kubelets)
    (claim,) = [
        c for c in (await claims(cluster)).values() if (c["metadata"].get("labels") or {}).get(OBJECT_LABEL)
    ]
    assert [r["resource"] for r in claim["status"]["reservedFor"]] == ["podgroups"]
