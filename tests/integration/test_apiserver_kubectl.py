"""The real kubectl against the embedded API server (skipped when kubectl is not on PATH)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from authkit import served_over_https
from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.cluster.apiserver.database import PODS
from gpudra.testing import eventually

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
async def apiserver(tmp_path: Path) -> AsyncIterator[EmbeddedAPIServer]:
    """Served over HTTPS, as ``gpudra up`` serves it: kubectl sends credentials over TLS only."""
    server = served_over_https(tmp_path / "pki")
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def kubectl(apiserver: EmbeddedAPIServer, tmp_path: Path) -> Kubectl:
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
    # as against kube-apiserver: the live claim carries the defaults (count: 1), so the JSON merge patch of its
    # atomic requests list is not empty; the spec itself is unchanged
    assert "resourceclaim.resource.k8s.io/claim-1 configured" in out
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
    spec = {
        "driver": "gpu.example.com",
        "nodeName": "n1",
        "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
    }
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


async def test_get_pods_watch_receives_event(
    kubectl: Kubectl, apiserver: EmbeddedAPIServer, tmp_path: Path
) -> None:
    """kubectl get pods --watch-only prints a pod created while it watches (and only such a pod)."""
    pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: watched}\nspec: {containers: [{name: a, image: x}]}\n"
    (tmp_path / "pod.yaml").write_text(pod)
    watcher = asyncio.ensure_future(kubectl("get", "pods", "--watch-only", "--request-timeout=4s", wait=30))
    pods = apiserver.database.stores[PODS]
    await eventually(lambda: bool(pods.watchers), what="kubectl's watch of pods")
    rc, _, err = await kubectl("apply", "-f", str(tmp_path / "pod.yaml"))
    assert rc == 0, err
    _, out, _ = await watcher
    assert "watched" in out
    assert "Pending" in out


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GENERATORS = [
    ("namespace", "team"),
    ("deployment", "web", "--image=nginx", "--replicas=0", "--port=8080"),
    ("deployment", "tools", "--image=busybox", "--image=ubuntu:22.04"),
    ("deployment", "clock", "--image=busybox", "--", "date"),
    ("job", "once", "--image=busybox", "--", "echo", "hi"),
    ("configmap", "cfg", "--from-literal=a=1", "--from-literal=b=two"),
    ("secret", "generic", "pw", "--from-literal=password=s3cr3t"),
    ("secret", "tls", "cert", f"--cert={FIXTURES / 'tls/tls.crt'}", f"--key={FIXTURES / 'tls/tls.key'}"),
    ("secret", "docker-registry", "reg", "--docker-username=u", "--docker-password=p", "--docker-email=e@x"),
    ("serviceaccount", "robot"),
    ("service", "clusterip", "api", "--tcp=80:8080", "--tcp=443:https"),
    ("service", "clusterip", "headless", "--clusterip=None"),
    ("service", "nodeport", "np", "--tcp=80:8080", "--node-port=30080"),
    ("service", "loadbalancer", "lb", "--tcp=443:8443"),
    ("service", "externalname", "ext", "--external-name=example.com"),
    ("priorityclass", "high", "--value=1000"),
]
_CLUSTER_SCOPED = ("namespace", "priorityclass")
_SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")


def _comparable(obj: Any) -> Any:
    """Without what the server sets (metadata, status) and without nulls (Go writes some zero values as null)."""
    if isinstance(obj, dict):
        return {
            k: _comparable(v)
            for k, v in obj.items()
            if v is not None and k not in _SERVER_SET and k != "status"
        }
    if isinstance(obj, list):
        return [_comparable(v) for v in obj]
    return obj


async def test_every_kubectl_create_generator_for_a_served_kind(kubectl: Kubectl) -> None:
    """kubectl create sends protobuf: each generator of a kind the server serves creates the object, and
    `kubectl get -o yaml` reads back what the same generator writes as JSON with --dry-run=server (the server's
    defaults included)."""
    for generator in GENERATORS:
        namespaced = [] if generator[0] in _CLUSTER_SCOPED else ["-n", "team"]
        cut = generator.index("--") if "--" in generator else len(generator)
        args, command = list(generator[:cut]), list(generator[cut:])  # flags go before `-- command`
        rc, out, err = await kubectl("create", *args, *namespaced, "--dry-run=server", "-o", "json", *command)
        assert rc == 0, err
        expected = json.loads(out)
        rc, out, err = await kubectl("create", *args, *namespaced, *command)
        assert rc == 0 and "created" in out, (generator, err)
        kind, name = expected["kind"].lower(), expected["metadata"]["name"]
        rc, out, err = await kubectl("get", kind, name, *namespaced, "-o", "yaml")
        assert rc == 0, err
        stored = yaml.safe_load(out)
        assert stored["metadata"]["uid"] and stored["metadata"]["creationTimestamp"]
        assert _comparable(stored) == _comparable(expected), generator
    rc, out, _ = await kubectl("get", "deployment", "web", "-n", "team", "-o", "jsonpath={.spec.replicas}")
    assert out == "0"  # a pointer's zero survives protobuf
    rc, out, err = await kubectl("describe", "deployment", "web", "-n", "team")  # reads protobuf responses
    assert rc == 0 and "0 desired" in out, err


UNSERVED = [
    ("cronjob", "nightly", "--image=busybox", "--schedule=0 0 * * *"),
    ("quota", "limits", "--hard=pods=2"),
    ("role", "reader", "--verb=get", "--resource=pods"),
    ("rolebinding", "readers", "--role=reader", "--user=u"),
    ("clusterrole", "reader", "--verb=get", "--resource=pods"),
    ("clusterrolebinding", "readers", "--clusterrole=reader", "--user=u"),
    ("poddisruptionbudget", "pdb", "--selector=a=b", "--min-available=1"),
    ("ingress", "web", "--rule=example.com/=web:80"),
    ("token", "default"),
]


async def test_generators_of_kinds_the_server_does_not_serve_fail_as_on_a_real_server(
    kubectl: Kubectl,
) -> None:
    """A kind the server does not serve gets the 404 a real API server gives for an unserved resource."""
    for generator in UNSERVED:
        rc, _, err = await kubectl("create", *generator)
        assert rc != 0, generator
        assert "the server could not find the requested resource" in err, (generator, err)
