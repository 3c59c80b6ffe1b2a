"""The field selectors kube-apiserver supports, by resource, and its words for one it does not (400).

Taken from kube-apiserver v1.37.2 (tests/badinput/requests.yaml records what it answered): each resource
supports its own list, worded in one of four ways; custom resources support ``metadata.name`` and
``metadata.namespace`` (and a CRD's ``selectableFields``, which the project's CRDs do not declare).
"""

from __future__ import annotations

from .registry import ResourceType
from .selectorsyntax import FieldSelector
from .status import bad_request

_META = ("metadata.name", "metadata.namespace")
_INVOLVED = tuple(
    f"involvedObject.{f}"
    for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
)
_REGARDING = tuple(
    f"regarding.{f}"
    for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
)
_LABEL = "field label not supported: {field}"
_KNOWN = '"{field}" is not a known field selector: only "metadata.name", "metadata.namespace"'
_SUPPORTED: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {
    ("", "namespaces"): (("metadata.name", "status.phase"), _LABEL),
    ("", "nodes"): (("metadata.name", "spec.unschedulable"), _LABEL),
    ("", "pods"): (
        (
            *_META,
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        ),
        _LABEL,
    ),
    ("", "events"): ((*_META, *_INVOLVED, "reason", "reportingComponent", "source", "type"), _LABEL),
    ("events.k8s.io", "events"): ((*_META, *_REGARDING, "reason", "reportingController", "type"), _LABEL),
    ("", "secrets"): ((*_META, "type"), _LABEL),
    ("", "services"): ((*_META, "spec.clusterIP", "spec.type"), _LABEL),
    ("batch", "jobs"): ((*_META, "status.successful"), 'field label "{field}" not supported for Job'),
    ("resource.k8s.io", "resourceslices"): (
        ("metadata.name", "spec.nodeName", "spec.driver", "spec.pool.name"),
        "field label not supported for resource.k8s.io/{version}, Kind=ResourceSlice: {field}",
    ),
}


def check_field_selector(rt: ResourceType, selector: FieldSelector | None) -> None:
    """400 for the first field of ``selector`` that kube-apiserver does not support for ``rt``."""
    if selector is None:
        return
    supported, words = _SUPPORTED.get((rt.group, rt.plural), (_META, _LABEL if rt.is_custom else _KNOWN))
    for path, _, _ in selector.requirements:
        if path not in supported:
            raise bad_request(words.format(field=path, version=rt.version))
