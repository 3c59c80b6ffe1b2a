"""kubectl as users expect it, on the real kube-apiserver: `kubectl explain` describes every field of the project's
CRDs (from the models' descriptions), their short names and columns work, and the kubectl-gpudra plugin reads the
cluster as kubectl does (its kubeconfig: client certificates, not a bare URL)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from _realkit import MINOR, StartKubernetes

from clusterkit import StartCluster, described_fields, first_words, kubectl
from gpudra.api.crdgen import CRD_MODELS, openapi_schema
from gpudra.cluster.apiserver.versions import NEWEST_MINOR

BIN = Path(sys.executable).parent  # the project's entry points, kubectl-gpudra among them


async def test_kubectl_explain_describes_every_field_of_the_crds(start_kubernetes: StartKubernetes) -> None:
    cluster = await start_kubernetes("l4x4:1")
    for model in CRD_MODELS:
        plural = model.crd.plural
        described = [
            (p, d) for p, d in described_fields(openapi_schema(model)) if p not in ("apiVersion", "kind")
        ]
        assert described, plural
        # one `kubectl explain --recursive` per object is a field list; the descriptions are checked per parent
        parents = sorted({p.rpartition(".")[0] for p, _ in described})
        for parent in parents:
            text = " ".join(
                (await kubectl(cluster, "explain", f"{plural}.{parent}" if parent else plural)).split()
            )
            for path, description in described:
                if path.rpartition(".")[0] == parent:
                    assert first_words(description) in text, f"kubectl explain {plural}.{path}"


async def test_short_names_columns_and_the_plugin(
    start_kubernetes: StartKubernetes, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = await start_kubernetes("l4x4:1")
    resources = await kubectl(cluster, "api-resources", "--api-group=resource.nvidia.com")
    assert re.search(r"^computedomains\s+cd\s", resources, re.M)
    assert re.search(r"^computedomaincliques\s+cdclique\s", resources, re.M)
    assert "mlay" in await kubectl(cluster, "api-resources", "--api-group=gpudra.dev")
    assert "No resources found" in await kubectl(cluster, "get", "cd,cdclique,mlay", "-A")
    monkeypatch.setenv("PATH", f"{BIN}:{os.environ['PATH']}")  # kubectl finds kubectl-gpudra on PATH
    table = await kubectl(cluster, "gpudra", "status")
    assert "l4x4-0" in table and "4x NVIDIA L4" in table


BUILT_IN = [
    "resourceclaims.spec.devices.requests",
    "resourceclaims.spec.devices.requests.exactly",
    "resourceclaims.status.allocation.devices.results",
    "resourceslices.spec.devices",
    "deviceclasses.spec.selectors.cel",
    "resourceclaimtemplates.spec.spec",
    "pods.spec.resourceClaims",
    "pods.spec.containers.resources.claims",
]
GPUDRA = [
    "computedomains.spec",
    "computedomains.status.nodes",
    "computedomaincliques.daemons",
    "miglayouts.spec",
]


def field_lines(text: str) -> set[str]:
    """The FIELD header and the `name <type> [-required-]` lines of a `kubectl explain`."""
    return {line.strip() for line in text.splitlines() if line.startswith("FIELD:") or "\t<" in line}


async def test_kubectl_explain_reads_as_on_the_embedded_server(
    start_kubernetes: StartKubernetes, start_cluster: StartCluster
) -> None:
    """`kubectl explain` on the embedded server: gpudra's kinds read word for word as on the real kube-apiserver;
    built-in kinds with the same fields, types and required marks (the embedded server emulates the real one's
    version, or its newest where the real one is newer)."""
    real = await start_kubernetes("l4x4:1")
    embedded = await start_cluster("l4x4:1", kubernetes_version=f"1.{min(MINOR, NEWEST_MINOR)}")
    for path in GPUDRA:
        said = [await kubectl(c, "explain", path) for c in (real, embedded)]
        assert said[1] == said[0], path
    for path in BUILT_IN:
        real_lines, embedded_lines = [
            field_lines(await kubectl(c, "explain", path)) for c in (real, embedded)
        ]
        assert len(embedded_lines) > 1 and embedded_lines == real_lines, path


LOGGED_POD = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: default}
spec:
  spec:
    devices:
      requests:
      - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}
---
apiVersion: v1
kind: Pod
metadata: {name: smi, namespace: default}
spec:
  containers:
  - name: ctr
    image: ubuntu:22.04
    command: ["bash", "-c", "nvidia-smi -L; sleep infinity"]
    resources: {claims: [{name: gpu}]}
  resourceClaims:
  - {name: gpu, resourceClaimTemplateName: one-gpu}
"""


async def test_kubectl_logs_of_a_pod_on_a_stand_in_node(start_kubernetes: StartKubernetes) -> None:
    """kube-apiserver reaches the stand-in kubelets' node endpoint (TLS, the cluster CA) for `kubectl logs`: the
    container's nvidia-smi -L names the GPU its claim was given."""
    cluster = await start_kubernetes("dgx-h100:1")
    await kubectl(cluster, "apply", "-f", "-", stdin=LOGGED_POD)
    await kubectl(cluster, "wait", "--for=condition=Ready", "pod/smi", "--timeout=90s", timeout=100)
    log = await kubectl(cluster, "logs", "smi")
    given = json.loads(await kubectl(cluster, "get", "resourceclaims", "-o", "json"))["items"][0]
    (result,) = given["status"]["allocation"]["devices"]["results"]
    slices = json.loads(await kubectl(cluster, "get", "resourceslices", "-o", "json"))["items"]
    uuid = next(
        d["attributes"]["uuid"]["string"]
        for s in slices
        for d in s["spec"]["devices"]
        if (s["spec"]["pool"]["name"], d["name"]) == (result["pool"], result["device"])
    )
    assert f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {uuid})" in log.splitlines()
