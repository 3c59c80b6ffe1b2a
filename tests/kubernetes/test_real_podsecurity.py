"""The pods gpudra runs, judged by the real kube-apiserver's Pod Security admission: the controller and the
ComputeDomain IMEX daemons meet the restricted level; the agent needs the privileged level (docs/security.md says
why), which its namespace grants it. Each pod template is created with a server-side dry run in a namespace that
enforces the level."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml
from _realkit import StartKubernetes, admin

from clusterkit import kubectl
from gpudra.api.computedomain import ComputeDomain
from gpudra.cluster.up import EmbeddedCluster
from gpudra.computedomain.children import daemon_set
from gpudra.kube.resources import NAMESPACES, Resource

ROOT = Path(__file__).resolve().parents[2]
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", namespaced=True)


def base_workloads() -> dict[str, dict[str, Any]]:
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(ROOT / "manifests" / "base")], check=True, capture_output=True, text=True
    ).stdout
    return {
        d["metadata"]["name"]: d
        for d in yaml.safe_load_all(rendered)
        if d and d["kind"] in ("Deployment", "DaemonSet")
    }


def imex_daemon_set() -> dict[str, Any]:
    domain = ComputeDomain.from_wire(
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": {
                "name": "train",
                "namespace": "default",
                "uid": "0d1f3a94-4c5e-4e57-9a2b-6f1f2d3c4b5a",
            },
            "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "train-channel"}}},
        }
    )
    return daemon_set(domain, "gpudra", "ghcr.io/gpudra/gpudra:0.1.0")


async def a_namespace(cluster: EmbeddedCluster, name: str, level: str) -> str:
    labels = {
        "pod-security.kubernetes.io/enforce": level,
        "pod-security.kubernetes.io/enforce-version": "latest",
    }
    client = admin(cluster)
    await client.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
    )
    for account in ("gpudra-controller", "gpudra-agent", "gpudra-imex-daemon"):
        body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}}
        await client.create(SERVICE_ACCOUNTS, body, name)
    return name


async def dry_run_pod(cluster: EmbeddedCluster, workload: dict[str, Any], namespace: str) -> tuple[bool, str]:
    """Create the workload's pod template as a Pod, server-side dry run: (admitted, what the server said)."""
    template = workload["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": workload["metadata"]["name"], "labels": template["metadata"].get("labels", {})},
        "spec": template["spec"],
    }
    out = await kubectl(
        cluster,
        "create",
        "--dry-run=server",
        "-n",
        namespace,
        "-f",
        "-",
        check=False,
        stdin=yaml.safe_dump(pod),
    )
    return "created (server dry run)" in out, out


async def test_the_controller_and_imex_daemons_are_restricted_and_the_agent_is_privileged(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("l4x4:1")
    workloads = base_workloads()
    controller, agent = workloads["gpudra-controller"], workloads["gpudra-agent"]
    restricted = await a_namespace(cluster, "pss-restricted", "restricted")
    baseline = await a_namespace(cluster, "pss-baseline", "baseline")

    for workload in (controller, imex_daemon_set()):
        admitted, said = await dry_run_pod(cluster, workload, restricted)
        assert admitted, said

    for namespace in (restricted, baseline):
        admitted, said = await dry_run_pod(cluster, agent, namespace)
        assert not admitted
        assert f'violates PodSecurity "{namespace.removeprefix("pss-")}:latest"' in said, said
        assert 'privileged (container "agent" must not set securityContext.privileged=true)' in said, said
        assert '"plugins", "plugins-registry", "cdi"' in said and "hostPath" in said, said

    # the driver's namespace (manifests/base/namespace.yaml) admits it: it says privileged for Pod Security
    driver_namespace = await admin(cluster).get_raw(NAMESPACES, "gpudra")
    assert driver_namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    admitted, said = await dry_run_pod(cluster, agent, "gpudra")
    assert admitted, said
