"""Dynamic MIG and ComputeDomains on real nodes: a MIG instance the agent in its pod creates at prepare reaches a
real container as its parent GPU's and access capabilities' device nodes, and is destroyed with the pod; a
ComputeDomain's IMEX daemons run as real containers of gpudra's image and its workers get their IMEX channel."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml
from _nodekit import (
    StartRealNodes,
    all_running,
    apply,
    checkpoint,
    claim_of,
    claim_specs,
    container_ids,
    gpus,
    injected_nodes,
    on_workload_image,
    pods,
    real_node,
    smi_report,
)

from clusterkit import eventually, kubectl

ROOT = Path(__file__).resolve().parents[2]
DOMAIN = """
apiVersion: resource.nvidia.com/v1beta1
kind: ComputeDomain
metadata: {name: train, namespace: default}
spec:
  numNodes: 2
  channel: {resourceClaimTemplate: {name: train-channel}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: default}
spec:
  completions: 2
  parallelism: 2
  completionMode: Indexed
  template:
    metadata: {labels: {app: train}}
    spec:
      restartPolicy: Never
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - {labelSelector: {matchLabels: {app: train}}, topologyKey: kubernetes.io/hostname}
      containers:
      - name: worker
        image: cuda
        command: ["sh", "-c", "ls /dev/nvidia-caps-imex-channels; exec sleep 3600"]
        resources: {claims: [{name: channel}]}
      resourceClaims: [{name: channel, resourceClaimTemplateName: train-channel}]
"""


async def test_a_dynamic_mig_instance_reaches_a_real_container_and_goes_with_its_pod(
    start_real_nodes: StartRealNodes,
) -> None:
    """The access capabilities are numbered character devices (as on a node whose kernel has ``nvidia-caps``: the
    major is given here, the machine has none), which the runtime makes in the container: the node keeps no
    /dev/nvidia-caps, as a real node has none for a MIG instance just made."""
    cluster = await start_real_nodes("dgx-h100:1", dynamic_mig=True, agent_settings={"mig_caps_major": 1})
    node = "dgx-h100-0"
    assert not any(g.mig_devices for g in gpus(cluster, node))
    shutil.rmtree(real_node(cluster, node).dirs.driver_root / "dev" / "nvidia-caps")
    await apply(cluster, on_workload_image((ROOT / "examples" / "dynamic-mig-1g.yaml").read_text()))

    async def server_running() -> dict[str, Any] | None:
        return (await all_running(cluster, ["default"])).get("default/small-inference")

    pod = await eventually(server_running, timeout=120)
    uid = (await claim_of(cluster, pod, "mig"))["metadata"]["uid"]
    (instance,) = [m for g in gpus(cluster, node) for m in g.mig_devices]
    assert instance.profile == "1g.10gb"
    uuids, nodes = smi_report(await kubectl(cluster, "logs", "small-inference"))
    assert uuids == [instance.uuid]
    assert set(nodes) == injected_nodes(cluster, node, uid, None)
    assert len(nodes) == 3 and sum(n.startswith("/dev/nvidia-caps/") for n in nodes) == 2
    spec = yaml.safe_load(next(p for p in claim_specs(cluster, node) if uid in p.name).read_text())
    caps = [
        n for d in spec["devices"] for n in d["containerEdits"]["deviceNodes"] if "nvidia-caps" in n["path"]
    ]
    assert [(n["type"], n["major"], "hostPath" in n) for n in caps] == [("c", 1, False)] * 2

    await kubectl(cluster, "delete", "pod", "small-inference", "--wait=false")

    async def released() -> bool:
        left = [m for g in gpus(cluster, node) for m in g.mig_devices]
        return not await pods(cluster, "default") and not left

    await eventually(released, timeout=90)
    assert claim_specs(cluster, node) == [] and checkpoint(cluster, node) == {}


async def test_a_compute_domains_imex_daemons_run_as_real_containers(
    start_real_nodes: StartRealNodes,
) -> None:
    cluster = await start_real_nodes("gb200-nvl72:2")
    await apply(cluster, on_workload_image(DOMAIN))

    async def daemons_and_workers() -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        current = await all_running(cluster, ["default", "gpudra"])
        daemons = [p for key, p in current.items() if key.startswith("gpudra/computedomain-daemon-")]
        workers = [p for key, p in current.items() if key.startswith("default/train-")]
        return (daemons, workers) if len(daemons) == len(workers) == 2 else None

    daemons, workers = await eventually(daemons_and_workers, timeout=150)
    assert {p["spec"]["nodeName"] for p in daemons} == {p["spec"]["nodeName"] for p in workers}
    for daemon in daemons:
        (image,) = {c["image"] for c in daemon["spec"]["containers"]}
        assert image.startswith("localhost/gpudra:")  # the chart's own image, loaded on the node
        assert all(cid.startswith("containerd://") for cid, _ in container_ids(daemon).values())
    for worker in workers:
        log = await kubectl(cluster, "logs", worker["metadata"]["name"])
        assert log.split() == ["channel0"]
    domain = await kubectl(cluster, "get", "computedomain", "train", "-o", "jsonpath={.status.status}")
    assert domain == "Ready"
