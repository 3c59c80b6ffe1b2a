"""What a platform team installs: the kustomize base and overlays render, every object validates against the
Kubernetes 1.34 schemas (strict) or a CRD shipped with it, RBAC grants exactly what the code uses, the Dockerfile
lints, and the Tiltfile evaluates."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import starlark
import yaml

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = ["manifests/base", "manifests/overlays/simulated", "manifests/overlays/monitoring"]
NEEDS_KUBECTL = pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kubectl (kustomize) is not on PATH"
)
THIRD_PARTY_CRDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor")
}  # the Prometheus Operator's, not shipped here

# What the code does through the client layer, per component: (apiGroup, resource, verb). The Roles must grant
# exactly these. Controller: kopf watches (list+watch) slices, classes, claims and claim templates, lists
# namespaces and nodes to explain claims, posts Events, and uses kopf peering and CRD discovery (its web view
# watches namespaces too); for MigLayouts it watches them and Nodes, patches Nodes (desired MIG state) and MigLayout
# status, reads ConfigMaps (mig-parted files); the MIG planner creates, merge-patches and deletes its own
# MigLayouts. Agent: reads, watches (by name) and labels its Node, lists and writes its own slices, reads claims it
# prepares and writes their status, posts Events; its compute-domain driver reads ComputeDomainCliques and
# (host-managed) writes its daemon entry and channel-lease ConfigMaps. IMEX daemon: reads and writes its domain's
# ComputeDomainClique.
USED: dict[str, set[tuple[str, str, str]]] = {
    "gpudra-controller": {
        *{("resource.k8s.io", r, v) for r in ("resourceclaims", "resourceslices", "deviceclasses")
          for v in ("list", "watch")},
        ("", "nodes", "list"), ("", "namespaces", "list"), ("", "events", "create"),
        # the web view: informers over what it shows (the rest is watched above already)
        ("", "namespaces", "watch"),
        # ComputeDomains: watch domains, cliques and nodes; write status; apply and delete children
        ("", "nodes", "watch"), ("", "nodes", "patch"), ("", "pods", "list"), ("", "pods", "watch"),
        *{("resource.nvidia.com", "computedomains", v) for v in ("list", "watch", "patch")},
        ("resource.nvidia.com", "computedomains/status", "patch"),
        *{("resource.nvidia.com", "computedomaincliques", v) for v in ("list", "watch", "delete")},
        *{(g, r, v) for g, r in (("resource.k8s.io", "resourceclaimtemplates"), ("apps", "daemonsets"))
          for v in ("list", "create", "patch", "delete")},
        ("resource.k8s.io", "resourceclaimtemplates", "watch"),  # classes and opaque configs checked (Events)
        ("", "configmaps", "get"),
        *{("gpudra.dev", "miglayouts", v) for v in ("list", "watch", "create", "patch", "delete")},
        ("gpudra.dev", "miglayouts/status", "patch"),
        *{("kopf.dev", "clusterkopfpeerings", v) for v in ("get", "list", "watch", "patch")},
        *{("apiextensions.k8s.io", "customresourcedefinitions", v) for v in ("get", "list", "watch")},
    },
    "gpudra-agent": {
        ("", "nodes", "get"), ("", "nodes", "patch"), ("", "nodes", "list"), ("", "nodes", "watch"),
        *{("resource.k8s.io", "resourceslices", v) for v in ("list", "create", "update", "delete")},
        ("resource.k8s.io", "resourceclaims", "get"),
        ("resource.k8s.io", "resourceclaims/status", "patch"), ("resource.k8s.io", "resourceclaims/status", "update"),
        # writing status.devices: Kubernetes >= 1.36 checks these per driver, for claims on the token's node
        ("resource.k8s.io", "resourceclaims/driver", "associated-node:patch"),
        ("resource.k8s.io", "resourceclaims/driver", "associated-node:update"),
        ("", "events", "create"),
        # a channel's prepare watches its clique object while it waits for the node's daemon
        *{("resource.nvidia.com", "computedomaincliques", v) for v in ("get", "list", "watch", "create", "update")},
        *{("", "configmaps", v) for v in ("get", "create", "update")},
    },
    "gpudra-imex-daemon": {
        *{("resource.nvidia.com", "computedomaincliques", v) for v in ("get", "create", "update")},
    },
}  # fmt: skip


def render(path: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        ["kubectl", "kustomize", str(ROOT / path)], check=True, capture_output=True, text=True
    )
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


@NEEDS_KUBECTL
@pytest.mark.parametrize("path", OVERLAYS)
def test_every_object_validates(path: str) -> None:
    objects = render(path)
    crds = {(f"{c['spec']['group']}/{v['name']}", c["spec"]["names"]["kind"])
            for c in objects if c["kind"] == "CustomResourceDefinition" for v in c["spec"]["versions"]}  # fmt: skip
    for obj in objects:
        key = (obj["apiVersion"], obj["kind"])
        if key in crds or key in THIRD_PARTY_CRDS:
            continue
        kubernetes_validate.validate(obj, "1.34.0", strict=True)


@NEEDS_KUBECTL
def test_simulated_overlay_runs_agents_without_gpus() -> None:
    agent = next(o for o in render("manifests/overlays/simulated") if o["kind"] == "DaemonSet")
    env = {e["name"]: e.get("value") for e in agent["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GPUDRA_BACKEND"] == "simulated"
    assert "nodeSelector" not in agent["spec"]["template"]["spec"]


def _granted(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}  # fmt: skip


@pytest.mark.parametrize("component", sorted(USED))
def test_rbac_grants_exactly_what_the_code_uses(component: str) -> None:
    docs = yaml.safe_load_all(
        (ROOT / "manifests" / "base" / f"rbac-{component.removeprefix('gpudra-')}.yaml").read_text()
    )
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    granted = _granted(role)
    assert USED[component] - granted == set(), "the code needs more than the role grants"
    assert granted - USED[component] == set(), "the role grants more than the code uses"


def test_crds_kustomization_lists_every_generated_crd() -> None:
    listed = yaml.safe_load((ROOT / "crds" / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(
        p.name for p in (ROOT / "crds").glob("*.yaml") if p.name != "kustomization.yaml"
    )


def test_dashboard_queries_only_metrics_the_code_defines() -> None:
    from gpudra.metrics import Metrics

    names = {m.name for m in Metrics().registry.collect()}
    dashboard = json.loads((ROOT / "manifests/overlays/monitoring/gpudra-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {re.sub(r"_(bucket|total)$", "", m) for e in exprs for m in re.findall(r"gpudra_[a-z_]+", e)}
    assert used and used <= names, used - names


def test_dockerfile_passes_hadolint() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    result = subprocess.run([str(hadolint), str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_tiltfile_evaluates_with_stubbed_tilt() -> None:
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def stub(name: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> str:
            calls.append((name, args, kwargs))
            return name

        return record

    def loader(_: str) -> starlark.FrozenModule:
        ext = starlark.Module()
        ext.add_callable("docker_build_with_restart", stub("docker_build_with_restart"))
        return ext.freeze()

    module = starlark.Module()
    for name in ("allow_k8s_contexts", "sync", "fall_back_on", "k8s_yaml", "kustomize", "k8s_resource"):
        module.add_callable(name, stub(name))
    ast = starlark.parse("Tiltfile", (ROOT / "Tiltfile").read_text())
    starlark.eval(module, ast, starlark.Globals.standard(), starlark.FileLoader(loader))

    by_name = {name: (args, kwargs) for name, args, kwargs in calls}
    assert by_name["kustomize"][0] == ("manifests/overlays/simulated",)
    assert (ROOT / by_name["kustomize"][0][0] / "kustomization.yaml").exists()
    image, context = by_name["docker_build_with_restart"][0]
    assert (image, (ROOT / context / "Dockerfile").exists()) == ("gpudra", True)
    resources = {args[0] for name, args, _ in calls if name == "k8s_resource"}
    assert resources == {"gpudra-controller", "gpudra-agent"}
