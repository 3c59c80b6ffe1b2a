"""The ``scale`` subresource of Deployments and ReplicaSets (``kubectl scale``): an ``autoscaling/v1`` Scale read
from the object, and a Scale written back as the object's ``spec.replicas``, as kube-apiserver serves it."""

from __future__ import annotations

from typing import Any

from . import status as st
from .database import JSON_PATCH, MERGE, STRATEGIC, Database
from .patches import clone, json_patch, merge_patch, strip_strategic_directives
from .registry import ResourceType
from .store import Entry
from .workloadtable import selector_text


def scale_of(entry: Entry) -> dict[str, Any]:
    """The Scale of a Deployment or ReplicaSet."""
    obj = entry.obj
    meta = obj["metadata"]
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            key: meta[key]
            for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if key in meta
        },
        "spec": {"replicas": spec.get("replicas", 1)},
        "status": {
            "replicas": int(status.get("replicas") or 0),
            "selector": selector_text(spec.get("selector")),
        },
    }


def _patched(scale: dict[str, Any], patch: Any, content_type: str) -> Any:
    if content_type == JSON_PATCH:
        return json_patch(clone(scale), patch)
    if content_type == MERGE:
        return merge_patch(clone(scale), patch)
    if content_type == STRATEGIC:
        return merge_patch(clone(scale), strip_strategic_directives(patch))
    raise st.APIStatusError(
        415,
        "UnsupportedMediaType",
        f"the media type {content_type!r} is not a patch of the scale subresource",
    )


def write_scale(
    db: Database,
    rt: ResourceType,
    namespace: str,
    name: str,
    body: Any,
    *,
    patch_type: str = "",
    dry_run: bool = False,
) -> dict[str, Any]:
    """Write a Scale (PUT) or a patch of one (``patch_type``) as the object's replicas; the new Scale."""
    current = db.get(rt, namespace, name)
    scale = _patched(scale_of(current), body, patch_type) if patch_type else body
    if not isinstance(scale, dict):
        raise st.bad_request("the body of a Scale must be a JSON object")
    replicas = (scale.get("spec") or {}).get("replicas")
    if not isinstance(replicas, int) or isinstance(replicas, bool):
        raise st.invalid("Scale", "autoscaling", name, "spec.replicas", f"Invalid value: {replicas!r}")
    if replicas < 0:
        raise st.invalid(
            "Scale",
            "autoscaling",
            name,
            "spec.replicas",
            f"Invalid value: {replicas}: must be greater than or equal to 0",
        )
    rv = (scale.get("metadata") or {}).get("resourceVersion")
    if rv and str(rv) != current.obj["metadata"]["resourceVersion"]:
        raise st.conflict(rt.plural, rt.group, name, st.STALE)
    entry, _ = db.patch(rt, namespace, name, {"spec": {"replicas": replicas}}, MERGE, dry_run=dry_run)
    return scale_of(entry)
