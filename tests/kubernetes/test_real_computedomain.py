"""ComputeDomains on the real control plane: kube-scheduler places the workers by their pod (anti-)affinity,
kube-controller-manager runs the controller's IMEX daemon DaemonSet, and each daemon registers in its clique
with its own ServiceAccount token, bound to its pod by the node's kubelet."""

from __future__ import annotations

from typing import Any

import yaml
from _realkit import StartKubernetes, admin, phase, pods

from clusterkit import eventually, kubectl
from gpudra.computedomain.names import NODE_LABEL_PREFIX, OBJECT_LABEL
from gpudra.errors import NotFoundError
from gpudra.kube.resources import COMPUTE_DOMAINS, DAEMONSETS, NODES, RESOURCE_CLAIM_TEMPLATES

DOMAIN = """
apiVersion: resource.nvidia.com/v1beta1
kind: ComputeDomain
metadata: {name: train, namespace: default}
spec:
  numNodes: 0
  channel: {resourceClaimTemplate: {name: train-channel}}
"""


def workers(count: int, affinity: str, node_selector: str = "") -> str:
    return f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: train, namespace: default}}
spec:
  completions: {count}
  parallelism: {count}
  completionMode: Indexed
  template:
    metadata: {{labels: {{app: train}}}}
    spec:
      restartPolicy: Never
      {node_selector}
      affinity: {affinity}
      containers:
      - name: worker
        image: cuda
        resources: {{claims: [{{name: channel}}]}}
      resourceClaims: [{{name: channel, resourceClaimTemplateName: train-channel}}]
"""


SPREAD = (
    "{podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
    "[{labelSelector: {matchLabels: {app: train}}, topologyKey: kubernetes.io/hostname}]}}"
)


async def domain_nodes(cluster: Any) -> list[str]:
    body = await admin(cluster).get_raw(COMPUTE_DOMAINS, "train", "default")
    status = body.get("status") or {}
    return sorted(n["name"] for n in status.get("nodes") or []) if status.get("status") == "Ready" else []


async def test_four_workers_spread_by_anti_affinity_form_a_four_node_domain(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("gb200-nvl72:4")
    await kubectl(cluster, "apply", "-f", "-", stdin=DOMAIN)
    await kubectl(cluster, "apply", "-f", "-", stdin=workers(4, SPREAD))

    async def four_nodes() -> list[str]:
        nodes = await domain_nodes(cluster)
        return nodes if len(nodes) == 4 else []

    assert await eventually(four_nodes, timeout=120) == [f"gb200-nvl72-{i}" for i in range(4)]

    async def all_running() -> dict[str, Any]:
        """Workers and daemons Running (a worker's channel prepare may finish after the domain turned Ready)."""
        current = {n: p for n, p in (await pods(cluster)).items() if n.startswith("train-")}
        daemons = await pods(cluster, "gpudra")
        everyone = [*current.values(), *daemons.values()]
        done = len(current) == len(daemons) == 4 and all(phase(p) == "Running" for p in everyone)
        return current if done else {}

    current = await eventually(all_running, timeout=60)
    assert len({p["spec"]["nodeName"] for p in current.values()}) == 4

    # deleted: the controller, as bound by the admission policies, removes what it made (templates, DaemonSet,
    # node labels) before it releases its finalizer
    await kubectl(cluster, "delete", "computedomain", "train", "--wait=true", "--timeout=60s")
    daemon_sets, _ = await admin(cluster).list_raw(DAEMONSETS, "gpudra")
    templates, _ = await admin(cluster).list_raw(RESOURCE_CLAIM_TEMPLATES, label_selector=f"{OBJECT_LABEL}")
    labelled = [
        n["metadata"]["name"]
        for n in (await admin(cluster).list_raw(NODES))[0]
        if any(k.startswith(NODE_LABEL_PREFIX) for k in n["metadata"].get("labels") or {})
    ]
    assert (daemon_sets, templates, labelled) == ([], [], [])


async def test_a_clique_pod_affinity_keeps_the_workers_in_one_nvlink_rack(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("gb200-nvl72:20")  # rack 0: trays 0-17, rack 1: trays 18 and 19
    rack_one = "gb200-nvl72-19"

    async def clique_of(node: str) -> str:
        labels = (await admin(cluster).get_raw(NODES, node))["metadata"].get("labels") or {}
        return str(labels.get("nvidia.com/gpu.clique", ""))

    assert await eventually(lambda: clique_of(rack_one), timeout=60)
    together = (
        "{podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
        "[{labelSelector: {matchLabels: {app: train}}, topologyKey: nvidia.com/gpu.clique}]}, " + SPREAD[1:]
    )
    await kubectl(cluster, "apply", "-f", "-", stdin=DOMAIN)
    anchor = workers(1, SPREAD, node_selector=f"nodeSelector: {{kubernetes.io/hostname: {rack_one}}}")
    await kubectl(cluster, "apply", "-f", "-", stdin=anchor.replace("name: train,", "name: anchor,"))

    async def anchored() -> bool:
        return any(phase(p) == "Running" for n, p in (await pods(cluster)).items() if n.startswith("anchor-"))

    await eventually(anchored, timeout=90)
    await kubectl(cluster, "apply", "-f", "-", stdin=workers(1, together))

    async def placed() -> str:
        mine = [p for n, p in (await pods(cluster)).items() if n.startswith("train-")]
        return str(mine[0]["spec"].get("nodeName") or "") if mine else ""

    node = await eventually(placed, timeout=90)
    assert node == "gb200-nvl72-18", "the only other tray of the anchor's NVLink rack"
    assert await clique_of(node) == await clique_of(rack_one)


async def test_a_domain_with_200_kb_of_annotations_is_handled_and_deleted(
    start_kubernetes: StartKubernetes,
) -> None:
    """kube-apiserver caps an object's annotations at 256 KiB together: a domain with 200 KB of its own is still
    reconciled (the controller keeps its records in the domain's status) and its delete completes."""
    cluster = await start_kubernetes("gb200-nvl72:1")
    client = admin(cluster)
    domain = yaml.safe_load(DOMAIN)
    domain["metadata"]["annotations"] = {"example.com/notes": "x" * 200_000}
    await client.create(COMPUTE_DOMAINS, domain, "default")

    async def handled() -> dict[str, Any] | None:
        body = await client.get_raw(COMPUTE_DOMAINS, "train", "default")
        return (
            body if ((body.get("status") or {}).get("kopf") or {}).get("last-handled-configuration") else None
        )

    body = await eventually(handled, timeout=60)
    assert list(body["metadata"]["annotations"]) == ["example.com/notes"]
    await client.get_raw(RESOURCE_CLAIM_TEMPLATES, "train-channel", "default")  # the create handler's work

    await client.delete(COMPUTE_DOMAINS, "train", "default")

    async def gone() -> bool:
        try:
            await client.get_raw(COMPUTE_DOMAINS, "train", "default")
        except NotFoundError:
            return True
        return False

    await eventually(gone, timeout=60)
