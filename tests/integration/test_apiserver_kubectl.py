"""The real kubectl against the embedded API server (skipped when kubectl is not on PATH)."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from gpudra.cluster.apiserver import EmbeddedAPIServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH"),
]

Kubectl = Callable[..., Awaitable[tuple[int, str, str]]]

MANIFESTS = """
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: gpu.example.com
spec:
  selectors:
  - cel:
      expression: device.driver == "gpu.example.com"
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: claim-1
  namespace: default
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.example.com
"""

CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gizmos.example.com
spec:
  group: example.com
  scope: Cluster
  names: {plural: gizmos, singular: gizmo, kind: Gizmo, shortNames: [gz]}
  versions:
  - name: v1
    served: true
    storage: true
    additionalPrinterColumns:
    - {name: Color, type: string, jsonPath: .spec.color}
    - {name: Count, type: integer, jsonPath: .spec.count}
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"""


@pytest.fixture
async def kubectl(apiserver: EmbeddedAPIServer, tmp_path: Path) -> AsyncIterator[Kubectl]:
    config = tmp_path / "kubeconfig"
    apiserver.write_kubeconfig(config)
    env = {**os.environ, "KUBECONFIG": str(config), "HOME": str(tmp_path)}

    async def run(*args: str, stdin: str | None = None, wait: float = 60) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            "kubectl",
            "--cache-dir",
            str(tmp_path / "cache"),
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin else None), wait)
        return proc.returncode or 0, out.decode(), err.decode()

    return run


async def test_get_nodes_and_namespaces(kubectl: Kubectl) -> None:
    """kubectl get nodes / namespaces work (the built-in namespaces exist)."""
    rc, _, err = await kubectl("get", "nodes")
    assert rc == 0
    assert "No resources found" in err
    rc, out, _ = await kubectl("get", "ns")
    assert rc == 0
    assert "kube-system" in out
    assert "Active" in out


async def test_api_resources_lists_short_names(kubectl: Kubectl) -> None:
    """kubectl api-resources shows DRA resources and short names."""
    rc, out, _ = await kubectl("api-resources")
    assert rc == 0
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "resourceslices" in lines
    assert "deviceclasses" in lines
    assert " po " in lines["pods"]
    assert "crd,crds" in lines["customresourcedefinitions"]


async def test_apply_reapply_get_and_delete(kubectl: Kubectl, tmp_path: Path) -> None:
    """kubectl apply -f creates a DeviceClass and a ResourceClaim, re-applying a change patches them, get
    shows the claim STATE, and kubectl delete -f removes them (waiting for deletion)."""
    manifest = tmp_path / "dra.yaml"
    manifest.write_text(MANIFESTS)
    rc, out, err = await kubectl("apply", "-f", str(manifest))
    assert rc == 0, err
    assert "deviceclass.resource.k8s.io/gpu.example.com created" in out
    manifest.write_text(MANIFESTS.replace('== "gpu.example.com"', '== "gpu.example.com" && true'))
    rc, out, err = await kubectl("apply", "-f", str(manifest))
    assert rc == 0, err
    assert "deviceclass.resource.k8s.io/gpu.example.com configured" in out
    assert "resourceclaim.resource.k8s.io/claim-1 unchanged" in out
    rc, out, _ = await kubectl("get", "resourceclaims")
    assert out.split()[:6] == ["NAME", "STATE", "AGE", "claim-1", "pending", out.split()[5]]
    rc, out, _ = await kubectl(
        "get", "deviceclass", "gpu.example.com", "-o", "jsonpath={.spec.selectors[0].cel.expression}"
    )
    assert out.endswith("&& true")
    rc, out, err = await kubectl("delete", "-f", str(manifest))
    assert rc == 0, err
    assert 'resourceclaim.resource.k8s.io "claim-1" deleted' in out
    rc, _, err = await kubectl("get", "resourceclaim", "claim-1")
    assert rc != 0
    assert "NotFound" in err


async def test_crd_printer_columns(kubectl: Kubectl, tmp_path: Path) -> None:
    """An applied CRD becomes a served resource; kubectl get shows its printer columns and short name."""
    (tmp_path / "crd.yaml").write_text(CRD)
    rc, _, err = await kubectl("apply", "-f", str(tmp_path / "crd.yaml"))
    assert rc == 0, err
    gizmo = "apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: g1}\nspec: {color: blue, count: 7}\n"
    (tmp_path / "gizmo.yaml").write_text(gizmo)
    rc, _, err = await kubectl("apply", "-f", str(tmp_path / "gizmo.yaml"))
    assert rc == 0, err
    rc, out, _ = await kubectl("get", "gz")
    assert out.split() == ["NAME", "COLOR", "COUNT", "g1", "blue", "7"]


async def test_get_resourceslices_yaml(kubectl: Kubectl, apiserver: EmbeddedAPIServer) -> None:
    """kubectl get resourceslices -o yaml prints a List with the objects."""
    rt = apiserver.database.registry.get("resource.k8s.io", "v1", "resourceslices")
    assert rt is not None
    spec = {"driver": "gpu.example.com", "nodeName": "n1", "pool": {"name": "n1", "generation": 1}}
    apiserver.database.create(rt, "", {"metadata": {"name": "n1-slice"}, "spec": spec})
    rc, out, _ = await kubectl("get", "resourceslices", "-o", "yaml")
    assert rc == 0
    assert "kind: List" in out
    assert "name: n1-slice" in out
    assert "driver: gpu.example.com" in out
    rc, out, _ = await kubectl("get", "resourceslices")
    assert out.split()[:9] == [
        "NAME",
        "NODE",
        "DRIVER",
        "POOL",
        "AGE",
        "n1-slice",
        "n1",
        "gpu.example.com",
        "n1",
    ]


async def test_get_pods_watch_receives_event(kubectl: Kubectl, tmp_path: Path) -> None:
    """kubectl get pods -w prints a pod created while it watches."""
    pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: watched}\nspec: {containers: [{name: a, image: x}]}\n"
    (tmp_path / "pod.yaml").write_text(pod)
    watcher = asyncio.create_task(kubectl("get", "pods", "-w", "--request-timeout=4s", wait=30))
    await asyncio.sleep(1.5)
    rc, _, err = await kubectl("apply", "-f", str(tmp_path / "pod.yaml"))
    assert rc == 0, err
    _, out, _ = await watcher
    assert "watched" in out
    assert "Pending" in out


async def test_create_namespace_protobuf_fails_clearly(kubectl: Kubectl) -> None:
    """kubectl create ns sends protobuf: it fails with UnsupportedMediaType pointing at kubectl apply -f."""
    rc, _, err = await kubectl("create", "ns", "x")
    assert rc != 0
    assert "UnsupportedMediaType" in err
    assert "kubectl apply -f" in err
