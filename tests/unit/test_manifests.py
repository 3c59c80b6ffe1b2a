"""What a platform team installs: the kustomize base and overlays render, every object validates against the
Kubernetes 1.34 schemas (strict) or a CRD shipped with it, RBAC grants exactly what the code uses and where (the
driver's namespace unless it must be cluster-wide), the admission policies bind the base's service accounts and
the agent's own Node keys, the Dockerfile lints, and the Tiltfile evaluates."""

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

# What the code does through the client layer, per component: (apiGroup, resource, verb, scope). The Roles must
# grant exactly these, and where: "cluster" (a ClusterRole bound cluster-wide: cluster-scoped kinds, and kinds that
# live in users' namespaces) or "driver" (a Role in the driver's namespace: what lives there). Controller: kopf
# watches (list+watch) slices, classes, claims and claim templates, lists namespaces and nodes to explain claims,
# watches pods (a waiting pod gets its claims' explanation), posts Events (and patches their count), and uses kopf
# peering and CRD discovery (its web view watches namespaces too); for MigLayouts it watches them and Nodes,
# patches Nodes (desired MIG state) and MigLayout status, reads ConfigMaps (mig-parted files, in whichever
# namespace a MigLayout names); the MIG planner creates, merge-patches and deletes its own MigLayouts;
# ComputeDomains in users' namespaces, their channel templates there, and in the driver's namespace their daemon
# DaemonSets and cliques (the daemon pods are read through the cluster-wide pods rule). Agent: reads, watches (by
# name) and labels its Node, lists and writes its own slices, reads claims it prepares and writes their status,
# posts Events; its compute-domain driver reads ComputeDomainCliques and (host-managed) writes its daemon entry and
# channel-lease ConfigMaps, in the driver's namespace. IMEX daemon: reads and writes its domain's
# ComputeDomainClique, in the driver's namespace.
Grant = tuple[str, str, str, str]


def _at(scope: str, *grants: tuple[str, str, str]) -> set[Grant]:
    return {(g, r, v, scope) for g, r, v in grants}


USED: dict[str, set[Grant]] = {
    "gpudra-controller": _at(
        "cluster",
        *{("resource.k8s.io", r, v) for r in ("resourceclaims", "resourceslices", "deviceclasses")
          for v in ("list", "watch")},
        ("", "nodes", "list"), ("", "namespaces", "list"), ("", "events", "create"),
        # a waiting pod gets its claims' explanation; a repeated Event's count is patched
        ("", "pods", "list"), ("", "pods", "watch"), ("", "events", "patch"),
        # the web view: informers over what it shows (the rest is watched above already)
        ("", "namespaces", "watch"),
        # ComputeDomains: watch domains and nodes; write status; apply and delete channel templates
        ("", "nodes", "watch"), ("", "nodes", "patch"),
        *{("resource.nvidia.com", "computedomains", v) for v in ("list", "watch", "patch")},
        ("resource.nvidia.com", "computedomains/status", "patch"),
        *{("resource.k8s.io", "resourceclaimtemplates", v) for v in ("list", "create", "patch", "delete")},
        ("resource.k8s.io", "resourceclaimtemplates", "watch"),  # classes and opaque configs checked (Events)
        # a PodGroup-scoped domain's channel: its own ResourceSlice (listed above), applied and deleted with it
        *{("resource.k8s.io", "resourceslices", v) for v in ("create", "patch", "delete")},
        ("", "configmaps", "get"),
        *{("gpudra.dev", "miglayouts", v) for v in ("list", "watch", "create", "patch", "delete")},
        ("gpudra.dev", "miglayouts/status", "patch"),
        *{("kopf.dev", "clusterkopfpeerings", v) for v in ("get", "list", "watch", "patch")},
        *{("apiextensions.k8s.io", "customresourcedefinitions", v) for v in ("get", "list", "watch")},
    ) | _at(
        "driver",
        *{("apps", "daemonsets", v) for v in ("list", "create", "patch", "delete")},
        *{("resource.nvidia.com", "computedomaincliques", v) for v in ("list", "watch", "delete")},
    ),
    "gpudra-agent": _at(
        "cluster",
        ("", "nodes", "get"), ("", "nodes", "patch"), ("", "nodes", "list"), ("", "nodes", "watch"),
        # watch: a kubelet deletes its node's slices when it starts; the agent puts them back at once
        *{("resource.k8s.io", "resourceslices", v) for v in ("list", "watch", "create", "update", "delete")},
        ("resource.k8s.io", "resourceclaims", "get"),
        ("resource.k8s.io", "resourceclaims/status", "patch"), ("resource.k8s.io", "resourceclaims/status", "update"),
        # writing status.devices: Kubernetes >= 1.36 checks these per driver, for claims on the token's node
        ("resource.k8s.io", "resourceclaims/driver", "associated-node:patch"),
        ("resource.k8s.io", "resourceclaims/driver", "associated-node:update"),
        ("", "events", "create"),
    ) | _at(
        "driver",
        # a channel's prepare watches its clique object while it waits for the node's daemon
        *{
            ("resource.nvidia.com", "computedomaincliques", v)
            for v in ("get", "list", "watch", "create", "patch")
        },
        *{("", "configmaps", v) for v in ("get", "create", "update")},
    ),
    "gpudra-imex-daemon": _at(
        "driver", *{("resource.nvidia.com", "computedomaincliques", v) for v in ("get", "create", "patch")}
    ),
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
    # the base mounts the host's / as the driver root; a simulated agent is not given it, nor waits for its nodes
    assert "GPUDRA_DRIVER_ROOT_MOUNT" not in env
    assert "driver-root" not in {v["name"] for v in agent["spec"]["template"]["spec"]["volumes"]}


@NEEDS_KUBECTL
def test_agent_and_controller_root_filesystems_are_read_only() -> None:
    """Neither process writes outside its mounts (the agent: the kubelet's plugin directories and /var/run/cdi);
    the Pod Security levels of the pods are judged by the real API server (tests/kubernetes)."""
    for obj in render("manifests/base"):
        if obj["kind"] in ("Deployment", "DaemonSet"):
            container = obj["spec"]["template"]["spec"]["containers"][0]
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, obj["metadata"]["name"]


@NEEDS_KUBECTL
def test_simulated_agents_run_unprivileged() -> None:
    agent = next(o for o in render("manifests/overlays/simulated") if o["kind"] == "DaemonSet")
    security = agent["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert security["privileged"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["allowPrivilegeEscalation"] is False


@NEEDS_KUBECTL
def test_monitoring_network_policy_admits_only_the_scraper_to_what_the_pods_serve() -> None:
    objects = render("manifests/overlays/monitoring")
    policy = next(o for o in objects if o["kind"] == "NetworkPolicy")
    selector = policy["spec"]["podSelector"]["matchLabels"]
    workloads = [o for o in objects if o["kind"] in ("Deployment", "DaemonSet")]
    served = set()
    for workload in workloads:  # the policy selects every gpudra pod, and each port they serve is named in it
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), workload["metadata"]["name"]
        served |= {
            p["name"] for c in workload["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])
        }
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    [rule] = policy["spec"]["ingress"]
    assert served <= {p["port"] for p in rule["ports"]} <= {"metrics", "web"}
    [source] = rule["from"]
    assert source["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
    # the IMEX daemon pods (peers reach their nvidia-imex) are not selected
    daemon_labels = imex_daemon_set_labels()
    assert not selector.items() <= daemon_labels.items()


def imex_daemon_set_labels() -> dict[str, str]:
    from gpudra.api.computedomain import ComputeDomain
    from gpudra.computedomain.children import daemon_set

    meta = {"name": "d", "namespace": "default", "uid": "0d1f3a94-4c5e-4e57-9a2b-6f1f2d3c4b5a"}
    domain = ComputeDomain.from_wire(
        {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain", "metadata": meta,
         "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "c"}}}}
    )  # fmt: skip
    labels: dict[str, str] = daemon_set(domain, "gpudra", "gpudra:1")["spec"]["template"]["metadata"][
        "labels"
    ]
    return labels


def _rules(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}  # fmt: skip


def _granted(docs: list[dict[str, Any]], account: str) -> set[Grant]:
    """What the bindings in ``docs`` grant ``account`` (a ServiceAccount of the driver's namespace), and where."""
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in ("Role", "ClusterRole")}
    granted: set[Grant] = set()
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        subjects = {(s["kind"], s["name"], s.get("namespace")) for s in binding["subjects"]}
        if ("ServiceAccount", account, "gpudra") not in subjects:
            continue
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        scope = "cluster" if binding["kind"] == "ClusterRoleBinding" else "driver"
        granted |= {(*rule, scope) for rule in _rules(role)}
    return granted


@pytest.mark.parametrize("component", sorted(USED))
def test_rbac_grants_exactly_what_the_code_uses_where_it_uses_it(component: str) -> None:
    path = ROOT / "manifests" / "base" / f"rbac-{component.removeprefix('gpudra-')}.yaml"
    granted = _granted(list(yaml.safe_load_all(path.read_text())), component)
    assert USED[component] - granted == set(), "the code needs more than the roles grant"
    assert granted - USED[component] == set(), "the roles grant more than the code uses"


@NEEDS_KUBECTL
def test_namespaced_grants_land_in_the_driver_namespace() -> None:
    objects = render("manifests/base")
    for obj in objects:
        if obj["kind"] in ("Role", "RoleBinding"):
            assert obj["metadata"]["namespace"] == "gpudra", obj["metadata"]
        if obj["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            assert {s["namespace"] for s in obj["subjects"]} == {"gpudra"}, obj["metadata"]


def _policy(name: str) -> dict[str, Any]:
    docs = yaml.safe_load_all((ROOT / "manifests" / "base" / name).read_text())
    return next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy")


def test_node_policy_allows_the_agent_exactly_the_node_keys_it_writes() -> None:
    """node-admission.yaml lists the labels and annotations the agent owns; they are the ones its code writes (a
    key the code writes and the policy lacks would be refused on a real cluster, one the policy lists and the code
    never writes is a grant too many)."""
    from gpudra.agent.nodemark import GENERATION_ANNOTATION, PUBLISHED_LABEL
    from gpudra.computedomain.clique import CLIQUE_LABEL
    from gpudra.computedomain.names import NODE_LABEL_PREFIX
    from gpudra.mig.desired import CONFIG_STATE_LABEL, DESIRED_ANNOTATION, STATE_ANNOTATION

    variables = {v["name"]: v["expression"] for v in _policy("node-admission.yaml")["spec"]["variables"]}

    def owned(expression: str) -> set[str]:
        inside = expression.rsplit("!(k in [", 1)[1].split("]", 1)[0]
        keys = set(re.findall(r'"([^"]+)"', inside))
        return keys | {f"{p}*" for p in re.findall(r'k\.startsWith\("([^"]+)"\)', expression)}

    assert owned(variables["foreignLabels"]) == {
        PUBLISHED_LABEL, CLIQUE_LABEL, CONFIG_STATE_LABEL, f"{NODE_LABEL_PREFIX}*"
    }  # fmt: skip
    assert owned(variables["foreignAnnotations"]) == {GENERATION_ANNOTATION, STATE_ANNOTATION}
    assert DESIRED_ANNOTATION not in owned(
        variables["foreignAnnotations"]
    )  # the controller's, not the agent's


def test_controller_node_policy_allows_exactly_the_node_keys_the_controller_writes() -> None:
    """controller-node-admission.yaml lists the keys the controller writes on Nodes (controller/miglayouts.py,
    controller/domainchildren.py): the desired MIG state annotation, the MIG config state label, a domain's label
    (removed only); not the agent's keys."""
    from gpudra.agent.nodemark import PUBLISHED_LABEL
    from gpudra.computedomain.names import NODE_LABEL_PREFIX
    from gpudra.mig.desired import CONFIG_STATE_LABEL, DESIRED_ANNOTATION, STATE_ANNOTATION

    variables = {
        v["name"]: v["expression"] for v in _policy("controller-node-admission.yaml")["spec"]["variables"]
    }
    labels = variables["foreignLabels"]
    assert set(re.findall(r'k in \["([^"]+)"\]', labels)) == {CONFIG_STATE_LABEL}
    assert f'k.startsWith("{NODE_LABEL_PREFIX}") && !(k in variables.newLabels)' in labels  # removal only
    assert set(re.findall(r'"([^"]+)"', variables["foreignAnnotations"])) == {DESIRED_ANNOTATION}
    assert PUBLISHED_LABEL not in labels and STATE_ANNOTATION not in variables["foreignAnnotations"]


def test_daemonset_policy_allows_exactly_the_daemon_the_controller_runs() -> None:
    """daemonset-admission.yaml binds the controller's DaemonSets to the IMEX daemon's image (the one the base's
    controller runs, GPUDRA_IMEX_DAEMON_IMAGE, which ``gpudra up --control-plane kubernetes`` reads too), its
    arguments and its requests and limits (computedomain/children.py)."""
    from gpudra.cluster.kubernetes.bootstrap import daemon_image
    from gpudra.computedomain.children import DaemonPodSettings

    variables = {v["name"]: v["expression"] for v in _policy("daemonset-admission.yaml")["spec"]["variables"]}
    controller = (ROOT / "manifests" / "base" / "controller.yaml").read_text()
    assert variables["image"] == json.dumps(daemon_image(controller)) == '"ghcr.io/gpudra/gpudra:0.1.0"'
    settings = DaemonPodSettings()
    assert variables["resources"] == json.dumps({"cpu": settings.cpu, "memory": settings.memory})


def test_every_policy_binds_to_the_service_accounts_of_the_base() -> None:
    for path in sorted((ROOT / "manifests" / "base").glob("*-admission.yaml")):
        docs = list(yaml.safe_load_all(path.read_text()))
        policy = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy")
        binding = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding")
        assert binding["spec"]["policyName"] == policy["metadata"]["name"], path.name
        assert binding["spec"]["validationActions"] == ["Deny"], path.name
        assert policy["spec"]["failurePolicy"] == "Fail", path.name
        # the service accounts by name in any namespace: a base installed elsewhere (kustomize namespace) stays bound
        match = policy["spec"]["matchConditions"][0]["expression"]
        assert 'request.userInfo.username.startsWith("system:serviceaccount:")' in match, path.name
        named = set(re.findall(r'endsWith\(":([^"]+)"\)', match))
        assert named and named <= set(USED), (path.name, named)
        listed = yaml.safe_load((ROOT / "manifests" / "base" / "kustomization.yaml").read_text())["resources"]
        assert path.name in listed


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
