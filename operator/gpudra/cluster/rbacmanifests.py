"""The RBAC of manifests/base (rbac-*.yaml), as ``kubectl apply -k manifests/base`` installs it in a namespace:
what the embedded API server enforces for the controller's and the agents' ServiceAccounts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpudra import shippedyaml
from gpudra.cluster.kubernetes.bootstrap import repo_manifests

RBAC_KINDS = frozenset({"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"})


def in_namespace(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """``obj`` as kustomize's ``namespace:`` puts it in ``namespace``: a Role or RoleBinding there, and the
    ServiceAccounts a binding names too."""
    placed = {**obj, "metadata": dict(obj.get("metadata") or {})}
    if obj["kind"] in ("Role", "RoleBinding"):
        placed["metadata"]["namespace"] = namespace
    if "subjects" in obj:
        placed["subjects"] = [
            {**s, "namespace": namespace} if s.get("kind") == "ServiceAccount" else s for s in obj["subjects"]
        ]
    return placed


def manifest_rbac(namespace: str, base: Path | None = None) -> tuple[dict[str, Any], ...]:
    """The Roles, ClusterRoles and bindings of manifests/base, placed in ``namespace``."""
    found: list[dict[str, Any]] = []
    for path in sorted((base or repo_manifests()).glob("rbac-*.yaml")):
        for doc in shippedyaml.load_all(path.read_text()):
            if doc and doc.get("kind") in RBAC_KINDS:
                found.append(in_namespace(doc, namespace))
    return tuple(found)
