"""Workloads as kubectl shows them, checked the same way on the embedded cluster (tests/e2e) and on the real
control plane (tests/kubernetes): Deployment -> ReplicaSet -> pods with their printer columns, ``rollout status``,
``kubectl scale``, a Job that completes, a ``kubectl run`` pod whose command exits, the Events ``describe pod``
lists, and the wide columns of nodes."""

from __future__ import annotations

import json
from pathlib import Path

from clusterkit import eventually, kubectl
from gpudra.cluster.up import EmbeddedCluster

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - {name: server, image: busybox, command: [sleep, infinity]}
"""

JOB = """
apiVersion: batch/v1
kind: Job
metadata: {name: count, namespace: default}
spec:
  completions: 2
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: counter, image: busybox, command: [sh, -c, "echo one; sleep 1; echo two"]}
"""


def _table(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


async def _apply(cluster: EmbeddedCluster, tmp_path: Path, text: str) -> None:
    manifest = tmp_path / "workload.yaml"
    manifest.write_text(text)
    await kubectl(cluster, "apply", "-f", str(manifest))


async def deployment_rolls_out_through_a_replicaset(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    await _apply(cluster, tmp_path, DEPLOYMENT)
    said = await kubectl(cluster, "rollout", "status", "deploy/web", "--timeout=90s", timeout=120)
    assert 'deployment "web" successfully rolled out' in said

    header, row = _table(await kubectl(cluster, "get", "deploy", "web", "-o", "wide"))
    assert header == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]
    assert row[:4] == ["web", "2/2", "2", "2"] and row[5:] == ["server", "busybox", "app=web"]

    header, row = _table(await kubectl(cluster, "get", "rs", "-l", "app=web", "-o", "wide"))
    assert header == ["NAME", "DESIRED", "CURRENT", "READY", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]
    replicaset = row[0]
    pod_hash = replicaset.removeprefix("web-")
    assert row[1:4] == ["2", "2", "2"] and row[5:7] == ["server", "busybox"]
    assert sorted(row[7].split(",")) == ["app=web", f"pod-template-hash={pod_hash}"]

    pods = json.loads(await kubectl(cluster, "get", "pods", "-l", "app=web", "-o", "json"))["items"]
    assert len(pods) == 2
    for pod in pods:
        assert pod["metadata"]["name"].startswith(f"{replicaset}-")
        assert pod["metadata"]["labels"]["pod-template-hash"] == pod_hash
        (owner,) = pod["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("ReplicaSet", replicaset, True)
    rs = json.loads(await kubectl(cluster, "get", "rs", replicaset, "-o", "json"))
    (owner,) = rs["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Deployment", "web")


async def deployment_scales(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    await _apply(cluster, tmp_path, DEPLOYMENT)
    await kubectl(cluster, "rollout", "status", "deploy/web", "--timeout=90s", timeout=120)
    assert "deployment.apps/web scaled" in await kubectl(cluster, "scale", "deploy/web", "--replicas=3")
    await kubectl(cluster, "rollout", "status", "deploy/web", "--timeout=90s", timeout=120)
    _, row = _table(await kubectl(cluster, "get", "deploy", "web"))
    assert row[:4] == ["web", "3/3", "3", "3"]

    scale = json.loads(
        await kubectl(cluster, "get", "--raw", "/apis/apps/v1/namespaces/default/deployments/web/scale")
    )
    assert (scale["kind"], scale["apiVersion"]) == ("Scale", "autoscaling/v1")
    assert scale["spec"] == {"replicas": 3}
    assert scale["status"] == {"replicas": 3, "selector": "app=web"}

    await kubectl(cluster, "scale", "deploy/web", "--replicas=0")
    await kubectl(cluster, "rollout", "status", "deploy/web", "--timeout=90s", timeout=120)

    async def scaled_down() -> list[list[str]]:
        deploy = _table(await kubectl(cluster, "get", "deploy", "web"))[1]
        rs = _table(await kubectl(cluster, "get", "rs", "-l", "app=web"))[1]
        return [deploy[:4], rs[1:4]] if rs[1:3] == ["0", "0"] else []

    assert await eventually(scaled_down, timeout=60) == [["web", "0/0", "0", "0"], ["0", "0", "0"]]

    refused = await kubectl(cluster, "scale", "deploy/web", "--replicas=-1", check=False)
    assert "--replicas=COUNT" in refused or "must be greater than or equal to 0" in refused


async def job_completes(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    await _apply(cluster, tmp_path, JOB)
    await kubectl(cluster, "wait", "--for=condition=complete", "job/count", "--timeout=90s", timeout=120)
    header, row = _table(await kubectl(cluster, "get", "job", "count", "-o", "wide"))
    assert header == [
        "NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE", "CONTAINERS", "IMAGES", "SELECTOR",
    ]  # fmt: skip
    assert row[:3] == ["count", "Complete", "2/2"] and row[5:7] == ["counter", "busybox"]
    assert row[3].endswith("s")
    pods = _table(await kubectl(cluster, "get", "pods", "-l", "job-name=count"))[1:]
    assert [p[2] for p in pods] == ["Completed", "Completed"]


async def a_run_pod_whose_command_exits_completes(cluster: EmbeddedCluster) -> None:
    await kubectl(cluster, "run", "hi", "--image=busybox", "--restart=Never", "--", "echo", "hi")
    await kubectl(
        cluster,
        "wait",
        "--for=jsonpath={.status.phase}=Succeeded",
        "pod/hi",
        "--timeout=90s",
        timeout=120,
    )
    _, row = _table(await kubectl(cluster, "get", "pod", "hi"))
    assert row[:3] == ["hi", "0/1", "Completed"], row

    async def described() -> str:
        text = await kubectl(cluster, "describe", "pod", "hi")
        events = text.split("Events:", 1)[1]
        return text if all(f" {r} " in events for r in ("Scheduled", "Pulled", "Created", "Started")) else ""

    text = await eventually(described, timeout=60, what="Scheduled, Pulled, Created and Started events")
    assert "Successfully assigned default/hi to " in text
    assert "Container started" in text and 'Container image "busybox" already present on machine' in text


async def nodes_have_wide_columns(cluster: EmbeddedCluster) -> None:
    header, *rows = _table(await kubectl(cluster, "get", "nodes", "-o", "wide"))
    assert header[5:] == ["INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME"]
    nodes = json.loads(await kubectl(cluster, "get", "nodes", "-o", "json"))["items"]
    addresses = {
        n["metadata"]["name"]: next(
            a["address"] for a in n["status"]["addresses"] if a["type"] == "InternalIP"
        )
        for n in nodes
    }
    for row in rows:
        assert row[5] == addresses[row[0]]
        assert row[6] == "<none>"
        assert "<unknown>" not in row[7:]
