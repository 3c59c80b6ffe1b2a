"""The Helm chart (charts/gpudra) renders, with the real helm (built from its Go module by hack/helm/build.sh), the
same objects as the kustomize base with its defaults; every object validates; each value changes what it says and
nothing else; values.schema.json and the chart refuse mistakes (tests/fixtures/helm-values), naming the key, and a
key of NVIDIA's chart with what gpudra uses instead."""

from __future__ import annotations

import json
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpudra"
FIXTURES = ROOT / "tests" / "fixtures" / "helm-values"
BUILD = ROOT / "hack" / "helm" / "build.sh"
NEEDS_KUBECTL = pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kubectl (kustomize) is not on PATH"
)
CLUSTER_SCOPED = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "DeviceClass",
                  "ClusterKopfPeering", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}  # fmt: skip

Object = dict[str, Any]


@cache
def helm() -> str:
    """The helm binary (built once into the cache outside the work tree; `make helm` does the same)."""
    done = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f"hack/helm/build.sh failed:\n{done.stderr[-4000:]}"
    return done.stdout.strip().splitlines()[-1]


def render(*args: str, namespace: str = "gpudra", chart: Path = CHART) -> list[Object]:
    done = subprocess.run(
        [helm(), "template", "gpudra", str(chart), "--namespace", namespace, "--include-crds", *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def kustomize() -> list[Object]:
    out = subprocess.run(["kubectl", "kustomize", str(ROOT / "manifests" / "base")], check=True, capture_output=True,
                         text=True).stdout  # fmt: skip
    return [doc for doc in yaml.safe_load_all(out) if doc]


def keyed(objects: list[Object], namespace: str = "gpudra") -> dict[tuple[str, str, str, str], Object]:
    """By (apiVersion, kind, namespace, name), with the namespace each is installed in: a namespaced object without
    one in ``namespace``, a cluster-scoped one in none (kustomize sets it on kinds it does not know, such as
    ValidatingAdmissionPolicy; the API server has no namespace for them)."""
    out = {}
    for obj in objects:
        meta = obj["metadata"]
        if obj["kind"] in CLUSTER_SCOPED:
            meta.pop("namespace", None)
        else:
            meta.setdefault("namespace", namespace)
        out[(obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])] = obj
    return out


def find(objects: list[Object], kind: str, name: str) -> Object:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def env(workload: Object) -> dict[str, Any]:
    return {
        e["name"]: e.get("value", e.get("valueFrom"))
        for e in workload["spec"]["template"]["spec"]["containers"][0]["env"]
    }


@NEEDS_KUBECTL
def test_the_chart_renders_what_the_kustomize_base_holds() -> None:
    chart = keyed(render("--set", "createNamespace=true"))
    base = keyed(kustomize())
    assert sorted(chart) == sorted(base), "the chart and manifests/base hold different objects"
    for key, obj in base.items():
        assert chart[key] == obj, f"{key} differs between the chart and manifests/base"


def test_every_rendered_object_validates() -> None:
    objects = render("--set", "createNamespace=true")
    crds = {(f"{c['spec']['group']}/{v['name']}", c["spec"]["names"]["kind"])
            for c in objects if c["kind"] == "CustomResourceDefinition" for v in c["spec"]["versions"]}  # fmt: skip
    assert ("gpudra.dev/v1alpha1", "MigLayout") in crds
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) not in crds:
            kubernetes_validate.validate(obj, "1.34.0", strict=True)


def test_the_charts_crds_are_the_ones_crds_kustomization_lists() -> None:
    """Copies, not links (helm warns of links, and a chart is packaged on its own): the same bytes as crds/."""
    listed = yaml.safe_load((ROOT / "crds" / "kustomization.yaml").read_text())["resources"]
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == sorted(listed)
    for path in (CHART / "crds").iterdir():
        assert not path.is_symlink()
        assert path.read_bytes() == (ROOT / "crds" / path.name).read_bytes(), f"cp crds/{path.name} {path}"


def test_values_for_image_driver_features_and_resources() -> None:
    objects = render(
        "--set", "image.tag=1.2.3,driverName=gpu.example.com,agent.resources.requests.cpu=2",
        "--set", "featureGates.DynamicMIG=true,featureGates.NVMLDeviceHealthCheck=false,computeDomains.enabled=false",
        "--set", "webView.enabled=false,controller.replicas=1,controller.env.GPUDRA_MIG_PLANNER=apply",
    )  # fmt: skip
    agent, controller = (
        find(objects, "DaemonSet", "gpudra-agent"),
        find(objects, "Deployment", "gpudra-controller"),
    )
    for workload in (agent, controller):
        assert workload["spec"]["template"]["spec"]["containers"][0]["image"] == "ghcr.io/gpudra/gpudra:1.2.3"
        assert env(workload)["GPUDRA_DRIVER_NAME"] == "gpu.example.com"
    assert env(agent)["GPUDRA_MIG_POLICY"] == "Dynamic" and env(agent)["GPUDRA_HEALTH_CHECKS"] == "false"
    assert env(agent)["GPUDRA_COMPUTE_DOMAINS"] == "disabled"
    resources = agent["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["requests"]["cpu"] == 2
    assert resources["limits"]["memory"] == "512Mi"  # an override of one key keeps the other defaults
    assert controller["spec"]["replicas"] == 1 and env(controller)["GPUDRA_MIG_PLANNER"] == "apply"
    assert "GPUDRA_WEB_PORT" not in env(controller)
    assert all(p["name"] != "web" for p in controller["spec"]["template"]["spec"]["containers"][0]["ports"])
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ("Service", "gpudra-web") not in names and ("Service", "gpudra-metrics") in names
    assert ("DeviceClass", "compute-domain-daemon.nvidia.com") not in names
    assert ("ServiceAccount", "gpudra-imex-daemon") not in names
    gpu = find(objects, "DeviceClass", "gpu.nvidia.com")  # NVIDIA's class names stay, the selector follows
    expression = gpu["spec"]["selectors"][0]["cel"]["expression"]
    assert "'gpu.example.com'" in expression and "gpu.nvidia.com" not in expression
    role = find(objects, "ClusterRole", "gpudra-agent")
    assert any("gpu.example.com" in (rule.get("resourceNames") or []) for rule in role["rules"])
    assert ("Namespace", "gpudra") not in names  # created by `helm install --create-namespace`, by default


def test_a_toleration_added_keeps_the_agents_own_when_given_whole() -> None:
    """Lists replace lists in Helm: the default holds the nvidia.com/gpu toleration, so a values file that adds
    one lists both, as values.yaml shows."""
    objects = render("-f", str(FIXTURES / "good" / "everything.yaml"))
    tolerations = find(objects, "DaemonSet", "gpudra-agent")["spec"]["template"]["spec"]["tolerations"]
    assert {t["key"] for t in tolerations} == {"nvidia.com/gpu", "dedicated"}


def test_every_value_reaches_the_objects() -> None:
    objects = render("-f", str(FIXTURES / "good" / "everything.yaml"))
    agent, controller = (
        find(objects, "DaemonSet", "gpudra-agent"),
        find(objects, "Deployment", "gpudra-controller"),
    )
    pod, cpod = agent["spec"]["template"], controller["spec"]["template"]
    for template in (pod, cpod):
        spec = template["spec"]
        assert spec["containers"][0]["image"] == "registry.example.com/gpudra:9.9.9"
        assert spec["containers"][0]["imagePullPolicy"] == "Always"
        assert spec["imagePullSecrets"] == [{"name": "registry-creds"}]
        assert spec["affinity"]["nodeAffinity"]
        assert spec["priorityClassName"] == "gpu-critical"
        assert template["metadata"]["annotations"] == {"team": "ml"}
        assert template["metadata"]["labels"]["cost-center"] == "42"
    assert env(agent)["GPUDRA_LOG_LEVEL"] == env(controller)["GPUDRA_LOG_LEVEL"] == "DEBUG"
    assert env(agent)["GPUDRA_LOG_FORMAT"] == "console"
    assert env(agent)["GPUDRA_PLUGIN_DIR"] == "/data/kubelet/plugins/gpu.nvidia.com"
    assert env(agent)["GPUDRA_REGISTRY_DIR"] == "/data/kubelet/plugins_registry"
    assert env(agent)["GPUDRA_CDI_DIR"] == "/etc/cdi"
    assert env(agent)["GPUDRA_DRIVER_ROOT"] == "/run/nvidia/driver"
    for gate, variable in (
        ("MPSSupport", "GPUDRA_MPS_SUPPORT"),
        ("TimeSlicingSettings", "GPUDRA_TIME_SLICING_SETTINGS"),
    ):
        assert env(agent)[variable] == "false", gate
    for variable in ("GPUDRA_PASSTHROUGH_SUPPORT", "GPUDRA_DEVICE_METADATA", "GPUDRA_LIST_ATTRIBUTES"):
        assert env(agent)[variable] == "true"
    mounts = {m["name"]: m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts == {"plugins": "/data/kubelet/plugins", "plugins-registry": "/data/kubelet/plugins_registry",
                      "cdi": "/etc/cdi", "driver-root": "/driver-root"}  # fmt: skip
    assert agent["spec"]["updateStrategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert controller["spec"]["strategy"] == {"type": "Recreate"}
    assert env(controller)["GPUDRA_IMEX_DAEMON_MODE"] == "host-managed"
    assert json.loads(env(controller)["GPUDRA_IMEX_DAEMON_IMAGE_PULL_SECRETS"]) == ["registry-creds"]
    ports = {p["name"]: p["containerPort"] for p in cpod["spec"]["containers"][0]["ports"]}
    assert ports == {"metrics": 9500, "web": 8888}
    web = find(objects, "Service", "gpudra-web")
    assert web["spec"]["ports"][0]["port"] == 8080
    monitor = find(objects, "ServiceMonitor", "gpudra")
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "interval": "15s"}]
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    account = find(objects, "ServiceAccount", "gpudra-agent")
    assert account["metadata"]["annotations"] == {"iam.example.com/role": "gpudra"}
    assert find(objects, "Namespace", "gpudra")["metadata"]["labels"][
        "pod-security.kubernetes.io/enforce"
    ] == ("privileged")


def test_without_service_accounts_the_chart_creates_none() -> None:
    objects = render("--set", "serviceAccount.create=false")
    assert not [o for o in objects if o["kind"] == "ServiceAccount"]
    assert find(objects, "DaemonSet", "gpudra-agent")["spec"]["template"]["spec"]["serviceAccountName"] == (
        "gpudra-agent"
    )


@pytest.mark.parametrize("path", sorted((FIXTURES / "bad").glob("*.yaml")), ids=lambda p: p.stem)
def test_a_wrong_values_file_is_refused_naming_the_key(path: Path) -> None:
    """Each file's first lines say what the refusal must contain (``# expect: ...``); helm template and helm
    install read the same schema and templates, so both refuse."""
    expected = [
        line.split(":", 1)[1].strip()
        for line in path.read_text().splitlines()
        if line.startswith("# expect:")
    ]
    assert expected, f"{path.name} says nothing to expect"
    done = subprocess.run(
        [helm(), "template", "gpudra", str(CHART), "-f", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0, f"{path.name} was accepted"
    for text in expected:
        assert text in done.stderr, f"{path.name}: {text!r} not in:\n{done.stderr}"


@pytest.mark.parametrize(
    "values", [(), ("--set", "image.repository=registry.example/gpu/gpudra,image.tag=v9")]
)
def test_the_daemonset_policy_allows_the_image_the_controller_gives_the_imex_daemons(
    values: tuple[str, ...],
) -> None:
    """A stolen controller token cannot run another image on every node: the chart renders its one image into the
    controller's GPUDRA_IMEX_DAEMON_IMAGE and into the policy on the controller's DaemonSets."""
    objects = render(*values)
    controller = find(objects, "Deployment", "gpudra-controller")
    policy = find(objects, "ValidatingAdmissionPolicy", "gpudra-controller-imex-daemonsets")
    image = next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == "image")
    assert image == json.dumps(env(controller)["GPUDRA_IMEX_DAEMON_IMAGE"])
    assert controller["spec"]["template"]["spec"]["containers"][0]["image"] in image


def test_values_for_simulated_gpus_a_driver_root_and_a_cluster_without_a_service_proxy() -> None:
    """What gpudra up --real-nodes installs with (docs/real-node.md): the agent simulates its node's GPUs from a
    state file on the node, unprivileged; CDI specs name device nodes under the driver root; every pod of the
    driver, the IMEX daemons too, reaches the API server at the address given; the daemons run the chart's image."""
    objects = render(
        "--set", "image.repository=localhost/gpudra,image.tag=dev,driverRoot=/run/nvidia/driver",
        "--set", "kubernetesServiceHost=192.0.2.2,kubernetesServicePort=6443,simulated.enabled=true",
    )  # fmt: skip
    agent, controller = (
        find(objects, "DaemonSet", "gpudra-agent"),
        find(objects, "Deployment", "gpudra-controller"),
    )
    for workload in (agent, controller):
        assert env(workload)["KUBERNETES_SERVICE_HOST"] == "192.0.2.2"
        assert env(workload)["KUBERNETES_SERVICE_PORT"] == "6443"
    assert env(controller)["GPUDRA_IMEX_DAEMON_IMAGE"] == "localhost/gpudra:dev"
    assert json.loads(env(controller)["GPUDRA_IMEX_DAEMON_ENV"]) == {
        "KUBERNETES_SERVICE_HOST": "192.0.2.2",
        "KUBERNETES_SERVICE_PORT": "6443",
    }
    assert env(agent)["GPUDRA_DRIVER_ROOT"] == "/run/nvidia/driver"
    assert env(agent)["GPUDRA_BACKEND"] == "simulated"
    assert env(agent)["GPUDRA_SIMULATED_STATE"] == "/run/gpudra/simulated/gpus.state"
    pod = agent["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["securityContext"]["privileged"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    volume = next(v for v in pod["volumes"] if v["name"] == "simulated-gpus")
    assert volume["hostPath"]["path"] == "/run/gpudra/simulated"
    assert {"name": "simulated-gpus", "mountPath": "/run/gpudra/simulated"} in container["volumeMounts"]
    defaults = render()
    assert "KUBERNETES_SERVICE_HOST" not in env(find(defaults, "DaemonSet", "gpudra-agent"))
    assert "GPUDRA_IMEX_DAEMON_ENV" not in env(find(defaults, "Deployment", "gpudra-controller"))


def driver_root_mount(values: str) -> tuple[str | None, str | None, dict[str, object] | None]:
    """What the agent is told of the driver root (GPUDRA_DRIVER_ROOT_MOUNT), the host path mounted for it, and the
    container's mount of it, rendered with ``values``."""
    agent = find(render("--set", values), "DaemonSet", "gpudra-agent")
    pod = agent["spec"]["template"]["spec"]
    volume = next((v for v in pod["volumes"] if v["name"] == "driver-root"), None)
    mount = next((m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "driver-root"), None)
    host = volume["hostPath"]["path"] if volume else None
    return env(agent).get("GPUDRA_DRIVER_ROOT_MOUNT"), host, mount


def test_the_agent_sees_the_driver_root_read_only_and_an_unprivileged_one_sees_no_host_root() -> None:
    """The agent chooses where CDI specs name device nodes by what is under the driver root, and waits for the
    GPUs' nodes there: the chart mounts the host's driver root read-only at /driver-root. With simulated GPUs the
    agent runs unprivileged and is not given the host's / (only a driver root of its own, as a real node's tier)."""
    mounted = {"name": "driver-root", "mountPath": "/driver-root", "readOnly": True}
    assert driver_root_mount("driverRoot=/") == ("/driver-root", "/", mounted)
    assert driver_root_mount("driverRoot=/run/nvidia/driver") == (
        "/driver-root",
        "/run/nvidia/driver",
        mounted,
    )
    assert driver_root_mount("simulated.enabled=true") == (None, None, None)
    assert driver_root_mount("simulated.enabled=true,driverRoot=/run/nvidia/driver") == (
        "/driver-root", "/run/nvidia/driver", mounted,
    )  # fmt: skip


def test_another_namespace_reaches_every_reference_to_it() -> None:
    objects = render(namespace="gpu-system")
    for obj in objects:
        if obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"]["namespace"] == "gpu-system", obj["metadata"]["name"]
        for subject in obj.get("subjects") or []:
            assert subject["namespace"] == "gpu-system"
    policies = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]
    assert len(policies) >= 5
    # they match the agent's (or the IMEX daemon's) account in whichever namespace it runs
    for policy in policies:
        conditions = " ".join(c["expression"] for c in policy["spec"]["matchConditions"])
        assert "system:serviceaccount:gpudra:" not in conditions and ":gpudra-" in conditions, conditions


def test_helm_lint_and_template_print_no_warning() -> None:
    lint = subprocess.run(
        [helm(), "lint", str(CHART), "--strict"], capture_output=True, text=True, timeout=120
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert "[WARNING]" not in lint.stdout and not lint.stderr, lint.stdout + lint.stderr
    template = subprocess.run(
        [helm(), "template", "gpudra", str(CHART)], capture_output=True, text=True, timeout=120
    )
    assert template.returncode == 0 and not template.stderr, template.stderr


def test_the_packaged_chart_stands_alone(tmp_path: Path) -> None:
    """The archive `helm package` makes renders the same without the repository."""
    done = subprocess.run(
        [helm(), "package", str(CHART), "-d", str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    (archive,) = tmp_path.glob("gpudra-*.tgz")
    assert keyed(render(chart=archive)) == keyed(render())
