"""Discovery documents, /version and the minimal OpenAPI v3 that lets ``kubectl apply`` leave validation to
us.

kubectl checks, per group-version, whether a PATCH operation tagged with the kind's
``x-kubernetes-group-version-kind`` declares the ``fieldValidation`` query parameter; if so it validates
server-side and needs no schema (and /openapi/v2 may 404).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .openapi import component_schemas
from .registry import Registry, ResourceType
from .versions import KubeVersion

_SUBRESOURCE_VERBS = {
    "status": ["get", "patch", "update"],
    "binding": ["create"],
    "scale": ["get", "patch", "update"],
    "exec": ["create", "get"],
    "attach": ["create", "get"],
    "portforward": ["create", "get"],
}
_SUBRESOURCE_KIND = {
    "binding": "Binding",
    "scale": "Scale",
    "exec": "PodExecOptions",
    "attach": "PodAttachOptions",
    "portforward": "PodPortForwardOptions",
}


def api_versions() -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "apiVersion": "v1",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    }


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}


def group_list(registry: Registry) -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(g, vs) for g, vs in registry.groups().items()],
    }


def api_group(registry: Registry, name: str) -> dict[str, Any] | None:
    versions = registry.groups().get(name)
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}


def _resource_entries(rt: ResourceType) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular_name,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": rt.verbs(),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    entries = [entry]
    for sub in sorted(rt.subresources):
        entries.append(
            {
                "name": f"{rt.plural}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": _SUBRESOURCE_KIND.get(sub, rt.kind),
                "verbs": _SUBRESOURCE_VERBS.get(sub, ["get"]),
            }
        )
    return entries


def resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    if group == "" and version != "v1":
        return None
    if group and not registry.has_group_version(group, version):
        return None
    resources = [e for rt in registry.in_group_version(group, version) for e in _resource_entries(rt)]
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


# ----------------------------------------------------------------------------- OpenAPI v3
def _gv_paths(registry: Registry) -> list[tuple[str, str, str]]:
    """(index key, group, version) of every served group-version."""
    result = [("api/v1", "", "v1")]
    for group, versions in registry.groups().items():
        result.extend((f"apis/{group}/{v}", group, v) for v in versions)
    return result


def _hash(registry: Registry, group: str, version: str) -> str:
    text = repr(
        sorted(
            (rt.plural, rt.kind, rt.namespaced, json.dumps(rt.schema, sort_keys=True))
            for rt in registry.in_group_version(group, version)
        )
    )
    return hashlib.sha256(text.encode()).hexdigest()[:32].upper()


def openapi_index(registry: Registry) -> dict[str, Any]:
    return {
        "paths": {
            key: {"serverRelativeURL": f"/openapi/v3/{key}?hash={_hash(registry, group, version)}"}
            for key, group, version in _gv_paths(registry)
        }
    }


_PARAMS = [
    {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
    for name in ("dryRun", "fieldManager", "fieldValidation", "force")
]


_DOCUMENTS: dict[tuple[str, str, str, int], dict[str, Any]] = {}
"""Documents built, by group, version, hash and emulated minor: kubectl fetches one on every apply, the schemas are
large."""


def openapi_document(
    registry: Registry, group: str, version: str, kube: KubeVersion
) -> dict[str, Any] | None:
    """A group-version document: one PATCH operation per resource, tagged with its kind, declaring the
    query parameters kubectl probes for, and the schemas ``kubectl explain`` reads."""
    if (group == "" and version != "v1") or (group and not registry.has_group_version(group, version)):
        return None
    key = (group, version, _hash(registry, group, version), kube.minor)
    found = _DOCUMENTS.get(key)
    if found is None:
        if len(_DOCUMENTS) > 256:
            _DOCUMENTS.clear()
        found = _DOCUMENTS[key] = _document(registry, group, version, kube)
    return found


def _document(registry: Registry, group: str, version: str, kube: KubeVersion) -> dict[str, Any]:
    prefix = f"/apis/{group}/{version}" if group else "/api/v1"
    paths: dict[str, Any] = {}
    for rt in registry.in_group_version(group, version):
        scope = "/namespaces/{namespace}" if rt.namespaced else ""
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        op = {
            "operationId": f"patch{rt.kind}",
            "parameters": _PARAMS,
            "responses": {"200": {"description": "OK"}},
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": gvk,
        }
        paths[f"{prefix}{scope}/{rt.plural}/{{name}}"] = {
            "patch": op,
            "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": kube.git_version},
        "paths": paths,
        "components": {"schemas": component_schemas(registry, group, version, kube.minor)},
    }
