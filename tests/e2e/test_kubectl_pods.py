"""Pods as `kubectl get pods` shows them on a real cluster: READY 1/1 and a kubelet's status once the claims are
prepared, ContainerCreating with a FailedPrepareDynamicResources Event while they cannot be."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from clusterkit import StartCluster, kubectl
from gpudra.cluster.up import EmbeddedCluster

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH"),
]

ONE_GPU_POD = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: single-gpu, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com}
---
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: default}
spec:
  initContainers:
  - {name: fetch, image: busybox}
  containers:
  - name: ctr
    image: ubuntu:22.04
    command: [bash, -c]
    args: ["nvidia-smi -L; sleep 9999"]
    resources:
      claims: [{name: gpu}]
  resourceClaims:
  - {name: gpu, resourceClaimTemplateName: single-gpu}
"""

UNPREPARABLE_POD = """
apiVersion: v1
kind: Pod
metadata: {name: stuck, namespace: default}
spec:
  nodeName: l4x4-0
  containers:
  - {name: ctr, image: ubuntu:22.04, resources: {claims: [{name: gpu}]}}
  resourceClaims:
  - {name: gpu, resourceClaimName: does-not-exist}
"""


async def _apply(cluster: EmbeddedCluster, tmp_path: Path, text: str) -> None:
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(text)
    await kubectl(cluster, "apply", "-f", str(manifest))


async def test_a_running_pod_has_the_status_a_kubelet_writes(
    start_cluster: StartCluster, tmp_path: Path
) -> None:
    cluster = await start_cluster("l4x4:1")
    await _apply(cluster, tmp_path, ONE_GPU_POD)
    await kubectl(cluster, "wait", "--for=condition=Ready", "pod/trainer", "--timeout=60s")

    table = (await kubectl(cluster, "get", "pods", "-o", "wide")).splitlines()
    assert table[0].split()[:5] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    row = table[1].split()
    assert row[:4] == ["trainer", "1/1", "Running", "0"]

    pod = json.loads(await kubectl(cluster, "get", "pod", "trainer", "-o", "json"))
    status = pod["status"]
    assert [c["type"] for c in status["conditions"]] == [
        "PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled",
    ]  # fmt: skip
    assert all(c["status"] == "True" for c in status["conditions"])
    assert status["hostIP"] == status["hostIPs"][0]["ip"] and "l4x4-0" in row
    assert status["podIP"] == status["podIPs"][0]["ip"] and status["podIP"] in row
    assert status["podIP"] != status["hostIP"] and status["startTime"]
    (container,) = status["containerStatuses"]
    assert container["name"] == "ctr" and container["ready"] is True and container["started"] is True
    assert container["restartCount"] == 0 and container["state"]["running"]["startedAt"]
    assert container["image"] == "docker.io/library/ubuntu:22.04"
    assert container["imageID"].startswith("docker.io/library/ubuntu@sha256:")
    assert container["containerID"].startswith("containerd://")
    (init,) = status["initContainerStatuses"]
    assert (
        init["state"]["terminated"]["reason"] == "Completed" and init["state"]["terminated"]["exitCode"] == 0
    )
    assert init["ready"] is True and init["started"] is False
    assert init["image"] == "docker.io/library/busybox:latest"

    listed = yaml.safe_load(await kubectl(cluster, "get", "pods", "-o", "yaml"))
    assert listed["items"][0]["status"]["containerStatuses"][0]["ready"] is True


async def test_a_pod_whose_claims_cannot_be_prepared_shows_why(
    start_cluster: StartCluster, tmp_path: Path
) -> None:
    cluster = await start_cluster("l4x4:1")
    await _apply(cluster, tmp_path, UNPREPARABLE_POD)
    await kubectl(
        cluster,
        "wait",
        "--for=jsonpath={.status.containerStatuses[0].state.waiting.reason}=ContainerCreating",
        "pod/stuck",
        "--timeout=60s",
    )
    row = (await kubectl(cluster, "get", "pods")).splitlines()[1].split()
    assert row[:4] == ["stuck", "0/1", "ContainerCreating", "0"]
    pod = json.loads(await kubectl(cluster, "get", "pod", "stuck", "-o", "json"))
    status = pod["status"]
    assert status["phase"] == "Pending" and "podIP" not in status and status["hostIP"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["reason"] == "ContainersNotReady"
    assert ready["message"] == "containers with unready status: [ctr]"
    events = await kubectl(
        cluster, "get", "events", "--field-selector", "involvedObject.name=stuck", "-o", "json"
    )
    (event,) = [e for e in json.loads(events)["items"] if e["reason"] == "FailedPrepareDynamicResources"]
    assert event["type"] == "Warning"
    assert event["message"].startswith("Failed to prepare dynamic resources: ")
    assert "does-not-exist" in event["message"]
