"""What a user applies to install gpudra, applied to the real control plane with the real kubectl.

The kustomize base (crds/, DeviceClasses, RBAC, the ValidatingAdmissionPolicy, the namespace) is rendered by
``kubectl kustomize`` and applied by ``kubectl apply``, exactly as a user would; only the workloads are left out,
because ``gpudra up`` runs the controller and the agents itself (with those workloads' service accounts).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

import gpudra
from gpudra import shippedyaml
from gpudra.errors import ConfigurationError

WORKLOAD_KINDS = frozenset({"Deployment", "DaemonSet", "Service"})
AGENT_SERVICE_ACCOUNT = "gpudra-agent"
CONTROLLER_SERVICE_ACCOUNT = "gpudra-controller"
"""The service accounts of manifests/base's agent DaemonSet and controller Deployment."""


def repo_manifests() -> Path:
    """The kustomize base (manifests/base, and the CRDs it names), shipped inside the package as
    ``gpudra/deploy``: in a checkout a link to the repository's, in a wheel a copy, so a pip-installed gpudra
    runs ``--control-plane kubernetes`` too."""
    base = Path(gpudra.__file__).resolve().parent / "deploy" / "manifests" / "base"
    if not (base / "kustomization.yaml").is_file():
        raise ConfigurationError(
            f"--control-plane kubernetes applies gpudra's manifests, and {base} has none: this installation of "
            "gpudra is incomplete (reinstall it)"
        )
    return base


async def _kubectl(kubeconfig: Path, *args: str, stdin: bytes | None = None) -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise ConfigurationError("--control-plane kubernetes needs kubectl on PATH")
    process = await asyncio.create_subprocess_exec(
        kubectl,
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
    )
    out, err = await process.communicate(stdin)
    if process.returncode != 0:
        raise ConfigurationError(f"kubectl {' '.join(args)} failed: {err.decode(errors='replace').strip()}")
    return out.decode()


def install_objects(rendered: str) -> list[dict[str, Any]]:
    """The rendered base without its workloads."""
    return [doc for doc in shippedyaml.load_all(rendered) if doc and doc.get("kind") not in WORKLOAD_KINDS]


def daemon_image(rendered: str) -> str:
    """The IMEX daemon image the base's controller Deployment runs (its GPUDRA_IMEX_DAEMON_IMAGE): the one image
    the base's admission policy lets the controller put in a DaemonSet."""
    for doc in shippedyaml.load_all(rendered):
        if doc and doc.get("kind") == "Deployment":
            for container in doc["spec"]["template"]["spec"]["containers"]:
                for variable in container.get("env") or ():
                    if variable["name"] == "GPUDRA_IMEX_DAEMON_IMAGE":
                        return str(variable["value"])
    raise ConfigurationError("gpudra's manifests set no GPUDRA_IMEX_DAEMON_IMAGE on the controller")


@dataclass(frozen=True)
class AppliedBase:
    objects: list[dict[str, Any]]
    """What was applied: the base without its workloads."""
    daemon_image: str
    """The IMEX daemon image of the base's controller (``daemon_image``)."""


async def apply_base(kubeconfig: Path, base: Path) -> AppliedBase:
    """Apply the base in the two steps docs/install.md gives users: the CRDs, then (once they are Established,
    or the API server has no mapping for their kinds yet) everything else."""
    rendered = await _kubectl(kubeconfig, "kustomize", str(base))
    objects = install_objects(rendered)
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    rest = [o for o in objects if o["kind"] != "CustomResourceDefinition"]
    await _kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump_all(crds).encode())
    await _kubectl(
        kubeconfig,
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "customresourcedefinitions",
        "--all",
    )
    await _kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump_all(rest).encode())
    await wait_for_policies(kubeconfig)
    return AppliedBase(objects, daemon_image(rendered))


PROBE = "gpudra-up-policy-probe"
_PROBE_POLICY: list[dict[str, Any]] = [
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": PROBE},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["configmaps"],
                    }
                ]
            },
            "matchConditions": [{"name": "probe", "expression": f'object.metadata.name == "{PROBE}"'}],
            "validations": [{"expression": "false", "message": PROBE}],
        },
    },
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": PROBE},
        "spec": {"policyName": PROBE, "validationActions": ["Deny"]},
    },
]


async def wait_for_policies(kubeconfig: Path, timeout: float = 60.0) -> None:
    """Return once kube-apiserver enforces the ValidatingAdmissionPolicies just applied. It loads them from its
    own informers, so for a moment after the apply a write they forbid still goes through. A probe policy
    applied after them is seen in order: once it refuses a dry-run create, the ones before it are in force."""
    probe = yaml.safe_dump_all(_PROBE_POLICY).encode()
    await _kubectl(kubeconfig, "apply", "-f", "-", stdin=probe)
    deadline = asyncio.get_running_loop().time() + timeout
    create = ("create", "configmap", PROBE, "--namespace=default", "--dry-run=server")
    while True:
        try:
            await _kubectl(kubeconfig, *create)
        except ConfigurationError as exc:
            if f"ValidatingAdmissionPolicy '{PROBE}'" not in str(exc):
                raise
            break
        if asyncio.get_running_loop().time() > deadline:
            raise ConfigurationError(
                f"kube-apiserver did not enforce the admission policies within {timeout}s"
            )
        await asyncio.sleep(0.1)
    await _kubectl(kubeconfig, "delete", "-f", "-", stdin=probe)
