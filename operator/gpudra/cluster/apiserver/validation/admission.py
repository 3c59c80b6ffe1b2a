"""What kube-apiserver does to a write before it stores it: decode (400 for a wrong type; an unknown field is an
error, a warning or nothing by ``fieldValidation``), default, validate (422 ``Invalid`` with every field error).

Built-in kinds decode against Kubernetes' own OpenAPI definitions of the version ``/version`` claims and are then
validated by kind (resource.k8s.io, pods and workloads' pod templates, nodes, metadata of every kind); custom
resources are pruned, defaulted and validated against their CRD's structural schema and CEL rules.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from gpudra.api.timestamps import rfc3339

from ..defaults import apply_defaults
from ..registry import CRD_PLURAL, ResourceType
from ..versions import KubeVersion
from . import claimstatus, configdata, core, customresources, objectmeta, resourceclaims, resourceslices
from .decoding import DecodeError, decode, document_order, strict_message
from .fielderrors import FieldError, go_quote, invalid, undecodable
from .gotypes import GoType, Schemas, schemas_for
from .poddefaults import default_pod
from .wording import reword

MODES = ("Strict", "Warn", "Ignore")
_TYPE_META = ("apiVersion", "kind", "metadata")
Validator = Callable[[dict[str, Any], dict[str, Any] | None, KubeVersion], list[FieldError]]
"""Validates a write: the object, the stored one (None on create) and the version emulated (its rules, its gates)."""
LIST_ATTRIBUTES = "DRAListTypeAttributes"


@dataclass
class Admission:
    """One request's field validation mode and the warnings it collected (sent as ``Warning:`` headers)."""

    mode: str = "Warn"
    warnings: list[str] = field(default_factory=list)
    namespace_labels: dict[str, str] = field(default_factory=dict)
    """The labels of the namespace a namespaced object is created in (the admin-access check reads them)."""
    duplicates: list[tuple[str, str]] = field(default_factory=list)
    """Duplicate keys Go's strict decoding found in the body: (field path or '', as it words them)."""

    def unknown_fields(self, kind: str, version: str, unknown: list[str], body: Any = None) -> None:
        """Refuse (Strict) or warn of (Warn) the unknown fields and duplicate keys, in the order of ``body``."""
        if (not unknown and not self.duplicates) or self.mode == "Ignore":
            return
        found = [(path, f"unknown field {go_quote(path)}") for path in unknown] + self.duplicates
        self.duplicates = []
        if unknown and len(found) > len(unknown):
            order = document_order(body)
            found.sort(key=lambda item: order.get(item[0], len(order)))
        if self.mode == "Strict":
            raise undecodable(kind, version, strict_message([text for _, text in found]))
        self.warnings.extend(text for _, text in found)


# ---- built-in kinds ----------------------------------------------------------------------------------------
# A claim's and a template's spec is immutable: on update kube-apiserver checks only that, so their selectors are
# stored expressions there (``includes()`` compiles with DRAListTypeAttributes off).
def _claim(obj: dict[str, Any], old: dict[str, Any] | None, kube: KubeVersion) -> list[FieldError]:
    includes = old is not None or LIST_ATTRIBUTES in kube.gates_on
    errors = resourceclaims.claim_spec(obj.get("spec") or {}, "spec", includes)
    if old is not None:
        errors = resourceclaims.immutable("spec", obj.get("spec"), old.get("spec")) + errors
        errors += claimstatus.claim_status(obj, old)
    return errors


def _template(obj: dict[str, Any], old: dict[str, Any] | None, kube: KubeVersion) -> list[FieldError]:
    spec = obj.get("spec") or {}
    includes = old is not None or LIST_ATTRIBUTES in kube.gates_on
    errors = objectmeta.template_labels(spec.get("metadata") or {}, "spec.metadata")
    errors += resourceclaims.claim_spec(spec.get("spec") or {}, "spec.spec", includes)
    if old is not None:
        errors = resourceclaims.immutable("spec", spec, old.get("spec")) + errors
    return errors


def _device_class(obj: dict[str, Any], old: dict[str, Any] | None, kube: KubeVersion) -> list[FieldError]:
    """A DeviceClass's selectors are stored expressions on an update that leaves all of them as they were (in the
    same order; none and an empty list are the same), as kube-apiserver's validateDeviceClassSpec decides."""
    spec = obj.get("spec") or {}
    unchanged = old is not None and (spec.get("selectors") or []) == (
        (old.get("spec") or {}).get("selectors") or []
    )
    return resourceclaims.class_spec(spec, unchanged or LIST_ATTRIBUTES in kube.gates_on)


def _pod_template(obj: dict[str, Any], old: dict[str, Any] | None, _: KubeVersion) -> list[FieldError]:
    return core.pod_template((obj.get("spec") or {}).get("template") or {}, "spec.template")


_CLAIM_SPEC: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "resourceclaims": lambda obj: obj.get("spec") or {},
    "resourceclaimtemplates": lambda obj: (obj.get("spec") or {}).get("spec") or {},
}
_VALIDATORS: dict[tuple[str, str], Validator] = {
    ("resource.k8s.io", "resourceclaims"): _claim,
    ("resource.k8s.io", "resourceclaimtemplates"): _template,
    ("resource.k8s.io", "deviceclasses"): _device_class,
    ("resource.k8s.io", "resourceslices"): lambda obj, old, kube: resourceslices.slice_spec(
        obj.get("spec") or {}, None if old is None else old.get("spec") or {}, kube
    ),
    ("resource.k8s.io", "devicetaintrules"): lambda obj, old, kube: resourceslices.taint_rule(
        obj.get("spec") or {}, kube
    ),
    ("", "pods"): lambda obj, old, _: (
        core.pod_spec(obj.get("spec") or {}, "spec") + ([] if old is None else core.pod_status(obj))
    ),
    ("", "nodes"): lambda obj, old, _: core.taints(
        (obj.get("spec") or {}).get("taints") or [], "spec.taints"
    ),
    ("", "configmaps"): configdata.config_map,
    ("", "secrets"): configdata.secret,
    ("apps", "deployments"): _pod_template,
    ("apps", "daemonsets"): _pod_template,
    ("apps", "replicasets"): _pod_template,
    ("batch", "jobs"): _pod_template,
}


def _defaults(rt: ResourceType, obj: dict[str, Any]) -> None:
    if (rt.group, rt.plural) == ("", "pods"):
        default_pod(obj)
    elif rt.plural in ("deployments", "daemonsets", "replicasets", "jobs") and not rt.is_custom:
        template = (obj.get("spec") or {}).get("template")
        if isinstance(template, dict):
            default_pod(template)
    if rt.group != "resource.k8s.io":
        return
    spec = obj.get("spec") or {}
    if rt.plural == "resourceclaims":
        resourceclaims.default_claim_spec(spec)
    elif rt.plural == "resourceclaimtemplates":
        resourceclaims.default_claim_spec(spec.get("spec") or {})
    elif rt.plural == "resourceslices":
        taints = [t for d in spec.get("devices") or [] if isinstance(d, dict) for t in d.get("taints") or []]
        _taint_times(taints)
    elif rt.plural == "devicetaintrules":
        _taint_times([spec.get("taint")])


def _taint_times(taints: list[Any]) -> None:
    """A device taint without ``timeAdded`` gets the time of the write, to the second (SetDefaults_DeviceTaint)."""
    now = rfc3339()
    for taint in taints:
        if isinstance(taint, dict) and not taint.get("timeAdded"):
            taint["timeAdded"] = now


class Admitter:
    """Decodes, defaults and validates writes for one server (the OpenAPI definitions of its version)."""

    def __init__(self, version: KubeVersion) -> None:
        self._schemas: Schemas = schemas_for(version.minor)
        self.version = version
        """The Kubernetes version emulated: its rules, and the gates off by default it has on
        (``DRAListTypeAttributes``)."""
        self._custom_meta = GoType(
            "struct", "unstructured", "", _fields={"metadata": self._schemas.object_meta}
        )
        """How a custom resource's metadata decodes: a struct with only ``metadata``."""

    def admit(
        self,
        rt: ResourceType,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        admission: Admission,
        *,
        decoded: Collection[str] = (),
    ) -> dict[str, Any]:
        """The object as it is stored; raises APIStatusError (400 or 422) when Kubernetes refuses it.
        ``decoded``: top-level fields that are the stored object's (decoded when it was written, so decoding them
        again changes nothing and finds nothing): a status write decodes only the status."""
        if rt.is_custom:
            return self._custom(rt, obj, old, admission)
        kind = self._schemas.kind(rt.group, rt.version, rt.kind)
        if kind is not None:
            if decoded:
                fresh = self._decode(rt, {k: v for k, v in obj.items() if k not in decoded}, kind, admission)
                obj = {k: obj[k] if k in decoded else fresh[k] for k in obj if k in decoded or k in fresh}
                obj.setdefault("metadata", {})
            else:
                obj = self._decode(rt, obj, kind, admission)
        _defaults(rt, obj)
        lists_off = LIST_ATTRIBUTES not in self.version.gates_on
        if lists_off and rt.group == "resource.k8s.io" and rt.plural == "resourceslices":
            resourceslices.drop_list_attributes(
                obj.get("spec") or {}, None if old is None else old.get("spec")
            )
        errors = objectmeta.validate(
            obj["metadata"], namespaced=rt.namespaced, rule=objectmeta.name_rule(rt.plural)
        )
        validator = _VALIDATORS.get((rt.group, rt.plural))
        if validator is not None:
            errors += validator(obj, old, self.version)
        if old is None and rt.group == "resource.k8s.io" and rt.plural in _CLAIM_SPEC:
            spec = _CLAIM_SPEC[rt.plural](obj)
            errors += resourceclaims.admin_access(spec.get("devices"), admission.namespace_labels)
        if rt.group == "resource.k8s.io":
            errors = reword(errors, obj, self.version)
        if rt.plural == CRD_PLURAL:
            for i, version in enumerate((obj.get("spec") or {}).get("versions") or ()):
                schema = (version.get("schema") or {}).get("openAPIV3Schema")
                errors += customresources.rule_compile_errors(
                    schema, f"spec.versions[{i}].schema.openAPIV3Schema"
                )
        if errors:
            raise invalid(rt.kind, rt.group, str(obj["metadata"].get("name") or ""), errors)
        return obj

    def _decode(
        self, rt: ResourceType, obj: dict[str, Any], kind: GoType, admission: Admission
    ) -> dict[str, Any]:
        try:
            decoded = decode(obj, kind)
        except DecodeError as error:
            raise undecodable(rt.kind, rt.version, error.message) from error
        if decoded.type_error:
            raise undecodable(rt.kind, rt.version, decoded.type_error)
        admission.unknown_fields(rt.kind, rt.version, decoded.unknown, obj)
        value: dict[str, Any] = decoded.value
        value.setdefault("metadata", {})
        return value

    def _custom(
        self, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None, admission: Admission
    ) -> dict[str, Any]:
        schema = rt.schema
        meta = self._decode(rt, {"metadata": obj.get("metadata") or {}}, self._custom_meta, admission)[
            "metadata"
        ]
        if schema is None:
            return obj
        unknown: list[str] = []
        body = {k: v for k, v in obj.items() if k not in _TYPE_META}
        pruned = customresources.prune(body, schema, "", unknown)
        admission.unknown_fields(rt.kind, rt.version, unknown, obj)
        value: dict[str, Any] = {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "metadata": meta,
            **pruned,
        }
        apply_defaults(value, schema)
        errors = objectmeta.validate(meta, namespaced=rt.namespaced, rule=objectmeta.name_rule(rt.plural))
        errors += customresources.check(value, old, schema, rule_values=self.version.rule_values)
        if errors:
            raise invalid(rt.kind, rt.group, str(meta.get("name") or ""), errors)
        return value
