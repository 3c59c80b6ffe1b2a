"""The same pods created on the embedded cluster (tests/integration/test_pod_defaults.py) and on the real control
plane (tests/kubernetes/test_real_pod_defaults.py), and how they are compared: field by field, once what differs
between any two clusters (names the server makes up, uids, versions, times, the node) is normalised away.
``fixtures/pods/kube-apiserver-v1.37.2.yaml`` is what kube-apiserver 1.37.2 stored for them, normalised; the real
tier checks that it still is."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

RECORDED = Path(__file__).parent / "fixtures" / "pods" / "kube-apiserver-v1.37.2.yaml"

SAMPLE_PODS = """
apiVersion: v1
kind: Pod
metadata: {name: burstable, namespace: default, labels: {app: sample}}
spec:
  containers:
  - name: main
    image: registry.example.com/cuda:12
    command: [sleep, infinity]
    resources:
      limits: {cpu: 100m, memory: 64Mi}
  - name: side
    image: busybox
---
apiVersion: v1
kind: Pod
metadata: {name: guaranteed, namespace: default}
spec:
  automountServiceAccountToken: false
  restartPolicy: Never
  priorityClassName: system-node-critical
  tolerations:
  - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 10}
  volumes:
  - name: data
    emptyDir: {}
  initContainers:
  - name: init
    image: busybox:1.36
    resources:
      limits: {cpu: 100m, memory: 64Mi}
  containers:
  - name: main
    image: busybox:latest
    ports: [{containerPort: 80}]
    resources:
      limits: {cpu: 100m, memory: 64Mi}
    volumeMounts: [{name: data, mountPath: /data}]
---
apiVersion: v1
kind: Pod
metadata: {name: besteffort, namespace: default}
spec:
  containers:
  - name: main
    image: busybox@sha256:0000000000000000000000000000000000000000000000000000000000000000
"""
_SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "managedFields")
_TOKEN_VOLUME = re.compile(r"^kube-api-access-[a-z0-9]{5}$")


def sample_pods() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(SAMPLE_PODS) if doc]


def _names(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _names(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_names(v) for v in value]
    return "kube-api-access-*" if isinstance(value, str) and _TOKEN_VOLUME.match(value) else value


def normalised(pod: dict[str, Any]) -> dict[str, Any]:
    """What a user sees of the stored pod that does not depend on the cluster: metadata without what the server
    makes up, the spec without the node, the token volume's random suffix as ``*``, and the QoS class."""
    meta = {k: v for k, v in pod["metadata"].items() if k not in _SERVER_SET}
    spec = {k: v for k, v in pod["spec"].items() if k != "nodeName"}
    named: dict[str, Any] = _names(
        {
            "apiVersion": pod["apiVersion"],
            "kind": pod["kind"],
            "metadata": meta,
            "spec": spec,
            "status": {"qosClass": (pod.get("status") or {}).get("qosClass")},
        }
    )
    return named


def recorded() -> dict[str, dict[str, Any]]:
    """What kube-apiserver 1.37.2 stored for each sample pod, normalised, by name."""
    found: dict[str, dict[str, Any]] = yaml.safe_load(RECORDED.read_text())
    return found
