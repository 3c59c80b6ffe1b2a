"""`gpudra explain pod`, run as a user runs it against the embedded cluster: every claim of a pod, the default
output within 80 columns (the sentence, then the nearest nodes), `-o wide` and `-o json`, the exit status (0 fits
now, 1 cannot fit, 2 bad input), and counts that hold together after a fault while claims are held."""

from __future__ import annotations

import json
from typing import Any

import pytest

from clusterkit import StartCluster, eventually, kubectl
from gpudra.cluster.up import EmbeddedCluster
from gpudra.kube.resources import PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from podexplainkit import (
    check_claim_not_made_is_explained,
    check_gated_pod_is_explained,
    check_node_filters_are_explained,
    check_pod_kept_off_by_cpu_says_kube_schedulers_words,
)
from podexplainkit import gpudra_explain as explain

PODS_YAML = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: gpus-3, namespace: default}
spec:
  spec:
    devices:
      requests: [{name: gpus, exactly: {deviceClassName: gpu.nvidia.com, count: 3}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: gpus-9, namespace: default}
spec:
  spec:
    devices:
      requests: [{name: gpus, exactly: {deviceClassName: gpu.nvidia.com, count: 9}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: one-gpu, namespace: default}
spec:
  devices:
    requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]
---
apiVersion: v1
kind: Pod
metadata: {name: holder, namespace: default}
spec:
  containers: [{name: main, image: cuda, resources: {claims: [{name: gpus}]}}]
  resourceClaims: [{name: gpus, resourceClaimTemplateName: gpus-3}]
"""
TRAINER = """
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: default}
spec:
  containers: [{name: main, image: cuda, resources: {claims: [{name: gpus}, {name: spare}]}}]
  resourceClaims: [{name: gpus, resourceClaimTemplateName: gpus-9}, {name: spare, resourceClaimName: one-gpu}]
"""


@pytest.fixture
async def cluster(start_cluster: StartCluster) -> EmbeddedCluster:
    """Two 8-GPU nodes; `holder` holds 3 GPUs of dgx-h100-0; an XID has tainted one GPU of dgx-h100-1; `trainer`
    waits for 9 GPUs (from a template) and one named GPU claim."""
    cluster = await start_cluster("dgx-h100:2", hardware_poll_seconds=0.1)
    assert cluster.client is not None
    client = cluster.client
    cluster.agents["dgx-h100-1"].health.state.recovery_seconds = 600.0
    await eventually(lambda: cluster.simulated["dgx-h100-1"].inject_xid(5, 79) > 0)

    async def tainted() -> bool:
        slices, _ = await client.list_raw(RESOURCE_SLICES)
        return any(d.get("taints") for s in slices for d in s["spec"].get("devices") or [])

    await eventually(tainted, timeout=30)
    await kubectl(cluster, "apply", "-f", "-", stdin=PODS_YAML)

    async def holding() -> bool:
        pod = await client.get_raw(PODS, "holder", "default")
        return bool(pod["spec"].get("nodeName"))

    await eventually(holding, timeout=30)
    await kubectl(cluster, "apply", "-f", "-", stdin=TRAINER)

    async def claims_made() -> bool:
        pod = await client.get_raw(PODS, "trainer", "default")
        return bool((pod.get("status") or {}).get("resourceClaimStatuses"))

    await eventually(claims_made, timeout=30)
    return cluster


async def made_claim(cluster: EmbeddedCluster, pod: str) -> str:
    assert cluster.client is not None
    body = await cluster.client.get_raw(PODS, pod, "default")
    return str(body["status"]["resourceClaimStatuses"][0]["resourceClaimName"])


async def test_explain_pod_says_each_claim_in_80_columns_and_exits_1_when_one_cannot_fit(
    cluster: EmbeddedCluster,
) -> None:
    code, out = await explain(cluster, "pod", "trainer")
    assert code == 1, out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80 and all(line == line.rstrip() for line in lines), out
    nine = await made_claim(cluster, "trainer")
    assert lines[0] == f"claim default/{nine} does not fit (InsufficientDevices)"
    header = next(i for i, line in enumerate(lines) if line.startswith("NODE"))
    assert " ".join(lines[1:header]) == (
        "needs 9 NVIDIA H100 80GB HBM3 on one node; the most on any node is 8 (dgx-h100-0, 3 of them in use). "
        "dgx-h100-1 has 7, 1 more tainted"
    ), out
    assert lines[header].split() == ["NODE", "NEED", "NOW", "WHEN", "FREED", "WHY"]
    rows = {line.split()[0]: line.split()[1:4] for line in lines if line.startswith("dgx-h100-")}
    assert rows == {"dgx-h100-0": ["9", "5", "8"], "dgx-h100-1": ["9", "7", "7"]}, out
    assert "claim default/one-gpu" in out and "one-gpu fits now on node dgx-h100-0" in out


async def test_counts_agree_in_json_and_closest_devices_in_wide_say_what_they_miss(
    cluster: EmbeddedCluster,
) -> None:
    code, out = await explain(cluster, "pod", "trainer", "-o", "json")
    assert code == 1, out
    data: dict[str, Any] = json.loads(out)
    assert data["pod"] == "default/trainer"
    nine, spare = data["claims"]
    assert (nine["state"], nine["fits"], spare["state"], spare["fits"]) == ("pending", False, "fits", True)
    assert {n["node"]: (n["now"], n["later"]) for n in nine["nodes"]} == {
        "dgx-h100-0": (5, 8),
        "dgx-h100-1": (7, 7),
    }
    assert nine["text"].startswith("needs 9 NVIDIA H100 80GB HBM3 on one node")
    held = [c for c in nine["closest"] if c["node"] == "dgx-h100-0"]
    assert len(held) == 3 and all(c["miss"].startswith("in use by default/") for c in held), nine["closest"]
    tainted = [c for c in nine["closest"] if c["node"] == "dgx-h100-1"]
    assert len(tainted) == 1 and tainted[0]["miss"].startswith("tainted "), nine["closest"]
    code, wide = await explain(cluster, "pod", "trainer", "-o", "wide")
    assert code == 1
    assert "why not, per request" in wide and "closest devices" in wide and "nodes, nearest first" in wide


async def test_an_allocated_claim_exits_0_and_bad_input_exits_2(cluster: EmbeddedCluster) -> None:
    code, out = await explain(cluster, "pod", "holder")
    assert code == 0, out
    assert f"claim default/{await made_claim(cluster, 'holder')} is allocated on node dgx-h100-0" in out
    code, out = await explain(cluster, "claim", "one-gpu")
    assert code == 0 and "fits now on node dgx-h100-0" in out, out
    code, out = await explain(cluster, "pod", "absent")
    assert code == 2 and "absent" in out, out
    code, out = await explain(cluster, "pod")
    assert code == 2 and "give `pod NAME`" in out, out
    assert cluster.client is not None
    claims, _ = await cluster.client.list_raw(RESOURCE_CLAIMS, "default")
    assert len(claims) == 3  # holder's, trainer's and one-gpu: explaining creates nothing


async def test_a_pod_is_explained_over_the_nodes_its_filters_let_it_go_to(
    start_cluster: StartCluster,
) -> None:
    await check_node_filters_are_explained(await start_cluster("dgx-h100:1,l4x4:1", web_port=0))


async def test_a_pod_whose_claim_kube_controller_manager_cannot_make_says_why(
    start_cluster: StartCluster,
) -> None:
    await check_claim_not_made_is_explained(await start_cluster("dgx-h100:1", web_port=0), quota=False)


async def test_a_pod_held_by_a_scheduling_gate_says_so_before_its_claims(start_cluster: StartCluster) -> None:
    await check_gated_pod_is_explained(await start_cluster("dgx-h100:1", web_port=0))


async def test_a_pod_whose_claims_fit_ends_with_what_kube_scheduler_says(start_cluster: StartCluster) -> None:
    await check_pod_kept_off_by_cpu_says_kube_schedulers_words(await start_cluster("dgx-h100:1", web_port=0))
