"""A body's ``apiVersion`` and ``kind`` against the path it was sent to, as kube-apiserver checks them.

Either may be left out (the path's is taken). A built-in kind of another version is refused, not converted; a
kind or version Kubernetes does not know, and a kind of the same version that is not the path's, are refused
with the decoder's words; a custom resource's kind is a field error (422).
"""

from __future__ import annotations

from typing import Any

from .registry import Registry, ResourceType
from .status import APIStatusError, bad_request

_RESOURCE_VERSIONS = ("v1", "v1beta2", "v1beta1", "v1alpha3")
"""resource.k8s.io's versions in kube-apiserver's scheme (served or not)."""
_RESOURCE_KINDS = ("ResourceClaim", "ResourceClaimTemplate", "DeviceClass", "ResourceSlice")
_SCHEME = 'in scheme "pkg/runtime/scheme.go:111"'


def _registered(registry: Registry, api_version: str, kind: str) -> bool:
    group, _, version = api_version.rpartition("/")
    if group == "resource.k8s.io" and version in _RESOURCE_VERSIONS and kind in _RESOURCE_KINDS:
        return True
    return any(rt.kind == kind for rt in registry.in_group_version(group, version) if not rt.is_custom)


def check_type_meta(registry: Registry, rt: ResourceType, body: Any) -> None:
    """400 (422 for a custom resource's kind) when the body's apiVersion or kind is not the path's."""
    if not isinstance(body, dict):
        return
    api_version = body.get("apiVersion") or rt.api_version
    kind = body.get("kind") or rt.kind
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return  # the decoder refuses a wrong type with its own words
    mismatch = f"the API version in the data ({api_version}) does not match the expected API version ({rt.api_version})"
    if rt.is_custom:
        if api_version != rt.api_version:
            raise bad_request(mismatch)
        if kind != rt.kind:
            name = str((body.get("metadata") or {}).get("name") or "")
            why = f'Invalid value: "{kind}": must be {rt.kind}'
            raise APIStatusError(
                422,
                "Invalid",
                f'{kind}.{rt.group} "{name}" is invalid: kind: {why}',
                name=name,
                group=rt.group,
                kind=kind,
                causes=[{"reason": "FieldValueInvalid", "message": why, "field": "kind"}],
            )
        return
    version = api_version.rpartition("/")[2]
    handled = f'{kind} in version "{version}" cannot be handled as a {rt.kind}'
    if not _registered(registry, api_version, kind):
        raise bad_request(f'{handled}: no kind "{kind}" is registered for version "{api_version}" {_SCHEME}')
    if api_version != rt.api_version:
        raise bad_request(mismatch)
    if kind != rt.kind:
        internal = (rt.group or "core").split(".")[0]
        raise bad_request(
            f"{handled}: converting ({version}.{kind}) to ({internal}.{rt.kind}): unknown conversion"
        )
