"""gpudra's Helm chart on real nodes, as a platform team runs it: ``helm uninstall`` leaves nothing of gpudra but
what docs/install.md says it keeps (the CRDs); ``helm install`` with a values file that sets every kind of value
runs gpudra with them; ``helm upgrade`` to a new image tag and a feature gate hands each node over without draining
a GPU pod, and the gate takes effect; ``helm rollback`` brings the first revision back, the GPU pods untouched."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from _nodekit import (
    StartRealNodes,
    admin,
    all_running,
    apply,
    container_ids,
    helm,
    pods,
    real_node,
    real_node_names,
    tag_gpudra_image,
)

from clusterkit import eventually, kubectl
from gpudra.kube.resources import DAEMONSETS, EVENTS, RESOURCE_SLICES

CRDS = {
    "customresourcedefinition.apiextensions.k8s.io/clusterkopfpeerings.kopf.dev",
    "customresourcedefinition.apiextensions.k8s.io/computedomaincliques.resource.nvidia.com",
    "customresourcedefinition.apiextensions.k8s.io/computedomains.resource.nvidia.com",
    "customresourcedefinition.apiextensions.k8s.io/miglayouts.gpudra.dev",
}
EXTRA_VALUES: dict[str, Any] = {
    "imagePullSecrets": [{"name": "registry-creds"}],
    "featureGates": {"DeviceMetadata": True},
    "logLevel": "DEBUG",
    "logFormat": "console",
    "metrics": {"port": 9500},
    "webView": {"port": 8888, "servicePort": 8080},
    "serviceAccount": {"annotations": {"iam.example.com/role": "gpudra"}},
    "controller": {"priorityClassName": "system-cluster-critical", "podAnnotations": {"team": "ml"}},
    "agent": {
        "podAnnotations": {"team": "ml"},
        "podLabels": {"cost-center": "42"},
        "resources": {"requests": {"cpu": "20m", "memory": "96Mi"}, "limits": {"memory": "640Mi"}},
    },
}
TIME_SLICED = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: time-sliced, namespace: default}
spec:
  spec:
    devices:
      requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]
      config:
      - opaque:
          driver: gpu.nvidia.com
          parameters:
            apiVersion: resource.nvidia.com/v1beta1
            kind: GpuConfig
            sharing: {strategy: TimeSlicing, timeSlicingConfig: {interval: Long}}
---
apiVersion: v1
kind: Pod
metadata: {name: sliced, namespace: default}
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: main
    image: localhost/gpudra-workload:latest
    imagePullPolicy: IfNotPresent
    resources: {claims: [{name: gpu}]}
  resourceClaims: [{name: gpu, resourceClaimTemplateName: time-sliced}]
"""
PLAIN = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: plain, namespace: default}
spec:
  spec:
    devices:
      requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]
---
apiVersion: v1
kind: Pod
metadata: {name: plain, namespace: default}
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: main
    image: localhost/gpudra-workload:latest
    imagePullPolicy: IfNotPresent
    resources: {claims: [{name: gpu}]}
  resourceClaims: [{name: gpu, resourceClaimTemplateName: plain}]
"""


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = (
            merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


async def names(cluster: Any, kinds: str, namespace: str | None = None) -> set[str]:
    where = ["-n", namespace] if namespace else []
    return set((await kubectl(cluster, "get", kinds, *where, "-o", "name")).split())


async def gpudra_left(cluster: Any) -> set[str]:
    """Every object of gpudra's kinds still in the cluster, but the API server's own (the namespace's default
    ServiceAccount and CA ConfigMap) and the namespace that helm's --create-namespace made."""
    namespaced = await names(cluster, "deploy,ds,svc,sa,role,rolebinding,cm,pods", "gpudra")
    cluster_wide = await names(
        cluster,
        "clusterrole,clusterrolebinding,validatingadmissionpolicy,validatingadmissionpolicybinding,deviceclass",
    )
    kopf = await names(cluster, "clusterkopfpeerings")
    left = {n for n in namespaced if n not in {"serviceaccount/default", "configmap/kube-root-ca.crt"}}
    left |= {n for n in cluster_wide if "gpudra" in n or n.startswith("deviceclass")}
    return left | kopf


async def all_removed(cluster: Any) -> None:
    """Until nothing of gpudra is left (what is, in the failure)."""
    seen: list[set[str]] = []

    async def removed() -> bool:
        seen.append(await gpudra_left(cluster))
        return not seen[-1]

    try:
        await eventually(removed, timeout=120, what="gpudra's objects removed")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; left: {sorted(seen[-1])}") from None


async def agents(cluster: Any) -> dict[str, dict[str, Any]]:
    return {k: p for k, p in (await pods(cluster, "gpudra")).items() if "/gpudra-agent-" in k}


async def rolled_out(cluster: Any, nodes: int) -> dict[str, dict[str, Any]]:
    """The agents once the DaemonSet's rollout is complete, each Running and ready; {} before."""
    ds = await admin(cluster).get_raw(DAEMONSETS, "gpudra-agent", "gpudra")
    status = ds.get("status") or {}
    current = await agents(cluster)
    done = status.get("observedGeneration") == ds["metadata"]["generation"] and (
        status.get("updatedNumberScheduled") == status.get("numberAvailable") == nodes == len(current)
    )
    return current if done and all(p["status"].get("phase") == "Running" for p in current.values()) else {}


async def published(cluster: Any) -> bool:
    slices, _ = await admin(cluster).list_raw(RESOURCE_SLICES)
    return {s["spec"].get("nodeName") for s in slices if s["spec"]["driver"] == "gpu.nvidia.com"} == set(
        real_node_names(cluster)
    )


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env") or []}


async def test_install_upgrade_rollback_and_uninstall_with_helm(
    start_real_nodes: StartRealNodes, tmp_path: Path
) -> None:
    cluster = await start_real_nodes("dgx-h100:2")
    installed = yaml.safe_load((cluster.options.kubeconfig.parent / "helm-values.yaml").read_text())
    # the chart's default logFormat (json): every line the agent logged is a JSON object
    first = next(iter((await agents(cluster)).values()))
    lines = (await kubectl(cluster, "logs", "-n", "gpudra", first["metadata"]["name"])).splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    assert any(r.get("event") == "agent starting" and r.get("level") == "info" for r in records)

    # uninstall what gpudra up installed: nothing is left but the CRDs; the kubelets remove the agents' slices
    await helm(cluster, "uninstall", "--wait")
    await all_removed(cluster)
    assert await names(cluster, "crd") >= CRDS

    async def no_slices() -> bool:
        slices, _ = await admin(cluster).list_raw(RESOURCE_SLICES)
        return not slices

    await eventually(no_slices, timeout=120)

    # install with every kind of value set
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(merged(installed, EXTRA_VALUES)))
    await helm(cluster, "install", "-f", str(values))
    await eventually(lambda: rolled_out(cluster, 2), timeout=150)
    await eventually(lambda: published(cluster), timeout=60)
    agent = next(iter((await agents(cluster)).values()))
    assert (
        agent["metadata"]["annotations"]["team"] == "ml"
        and agent["metadata"]["labels"]["cost-center"] == "42"
    )
    assert agent["spec"]["imagePullSecrets"] == [{"name": "registry-creds"}]
    container = agent["spec"]["containers"][0]
    assert container["resources"]["limits"]["memory"] == "640Mi"
    assert {p["containerPort"] for p in container["ports"]} == {9500}
    assert env_of(agent)["GPUDRA_LOG_LEVEL"] == "DEBUG" and env_of(agent)["GPUDRA_DEVICE_METADATA"] == "true"
    log = await kubectl(cluster, "logs", "-n", "gpudra", agent["metadata"]["name"])
    assert "[info     ] agent starting" in log and not log.startswith("{")  # the console format, not JSON
    assert "[debug    ] start-up heap frozen" in log  # logLevel DEBUG
    controller = [p for k, p in (await pods(cluster, "gpudra")).items() if "/gpudra-controller-" in k]
    assert controller and controller[0]["spec"]["priorityClassName"] == "system-cluster-critical"
    sa = await kubectl(
        cluster, "get", "sa", "gpudra-agent", "-n", "gpudra", "-o", "jsonpath={.metadata.annotations}"
    )
    assert "iam.example.com/role" in sa
    await apply(cluster, PLAIN)
    await eventually(lambda: all_running(cluster, ["default"]), timeout=90)
    before = {k: container_ids(p) for k, p in (await pods(cluster, "default")).items()}

    # upgrade: a new image tag, and the TimeSlicingSettings gate off
    for name in real_node_names(cluster):
        await tag_gpudra_image(cluster, name, "upgrade")
    old = set(await agents(cluster))
    await helm(
        cluster,
        "upgrade",
        "--reuse-values",
        "--set",
        "image.tag=upgrade,featureGates.TimeSlicingSettings=false",
    )

    async def upgraded() -> dict[str, dict[str, Any]]:
        current = await rolled_out(cluster, 2)
        return current if current and not set(current) & old else {}

    new = await eventually(upgraded, timeout=180)
    assert all(p["spec"]["containers"][0]["image"].endswith(":upgrade") for p in new.values())
    assert all(env_of(p)["GPUDRA_TIME_SLICING_SETTINGS"] == "false" for p in new.values())
    assert {k: container_ids(p) for k, p in (await pods(cluster, "default")).items()} == before  # not drained
    await apply(cluster, TIME_SLICED)

    async def refused() -> list[dict[str, Any]]:
        events, _ = await admin(cluster).list_raw(
            EVENTS, "default", field_selector="involvedObject.name=sliced"
        )
        return [e for e in events if "time-slicing settings are disabled" in e.get("message", "")]

    assert await eventually(refused, timeout=90)

    # rollback to the install: the first tag, the gate on again; the refused pod, made again, starts (the
    # kubelet would retry the first one too, after its back-off)
    await helm(cluster, "rollback", "1", "--wait")

    async def rolled_back() -> dict[str, dict[str, Any]]:
        current = await rolled_out(cluster, 2)
        tags = {p["spec"]["containers"][0]["image"].rsplit(":", 1)[1] for p in current.values()}
        return current if tags == {"dev"} else {}

    back = await eventually(rolled_back, timeout=180)
    assert all("GPUDRA_TIME_SLICING_SETTINGS" not in env_of(p) for p in back.values())
    await kubectl(cluster, "delete", "pod", "sliced", "--wait=true", timeout=120)
    await apply(cluster, TIME_SLICED)

    async def both_running() -> dict[str, dict[str, Any]]:
        current = await all_running(cluster, ["default"])
        return current if len(current) == 2 else {}

    current = await eventually(both_running, timeout=180)
    assert {k: container_ids(current[k]) for k in before} == before

    # the GPU pods go first (their claims are unprepared by the agents), then gpudra
    await kubectl(cluster, "delete", "pod", "--all", "-n", "default", "--wait=true", timeout=120)
    await helm(cluster, "uninstall", "--wait")
    await all_removed(cluster)
    assert await names(cluster, "crd") >= CRDS
    for name in real_node_names(cluster):
        assert not list(real_node(cluster, name).dirs.cdi.glob("*claim_*.json"))
