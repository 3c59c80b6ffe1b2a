"""core/v1 validation as kube-apiserver does it, for what the scheduler and GPU workloads read: node selectors
and affinity, label selectors, tolerations and taints, a pod's containers (name, image) and resource claims, and
the same in the pod templates of Deployments, Jobs, DaemonSets and ReplicaSets."""

from __future__ import annotations

from typing import Any

from . import names
from .fielderrors import (
    DUPLICATE,
    FieldError,
    duplicate,
    forbidden,
    invalid_value,
    not_found,
    not_supported,
    required,
)
from .objectmeta import template_labels

Errors = list[FieldError]
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _values(requirement: dict[str, Any], path: str, operators: tuple[str, ...]) -> Errors:
    operator, values = requirement.get("operator") or "", requirement.get("values") or []
    if operator in ("In", "NotIn"):
        if not values:
            return [required(f"{path}.values", "must be specified when `operator` is 'In' or 'NotIn'")]
    elif operator in ("Exists", "DoesNotExist"):
        if values:
            return [
                forbidden(
                    f"{path}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
                )
            ]
    elif operator in ("Gt", "Lt") and operator in operators:
        if len(values) != 1:
            return [
                required(f"{path}.values", "must be specified single value when `operator` is 'Lt' or 'Gt'")
            ]
    else:
        return [invalid_value(f"{path}.operator", operator, "not a valid selector operator")]
    return []


def _requirement(requirement: dict[str, Any], path: str, operators: tuple[str, ...]) -> Errors:
    errors = _values(requirement, path, operators)
    errors += names.label_name(f"{path}.key", str(requirement.get("key") or ""))
    for i, value in enumerate(requirement.get("values") or ()):
        errors += names.each(f"{path}.values[{i}]", str(value), names.label_value(str(value)))
    return errors


def _field_requirement(requirement: dict[str, Any], path: str) -> Errors:
    errors: Errors = []
    values = requirement.get("values") or []
    if requirement.get("operator") in ("In", "NotIn"):
        if len(values) != 1:
            errors.append(
                required(
                    f"{path}.values",
                    "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
                )
            )
    else:
        errors.append(
            invalid_value(
                f"{path}.operator", requirement.get("operator") or "", "not a valid selector operator"
            )
        )
    if requirement.get("key") != "metadata.name":
        errors.append(
            invalid_value(f"{path}.key", requirement.get("key") or "", "not a valid field selector key")
        )
    else:
        for i, value in enumerate(values):
            errors += names.each(f"{path}.values[{i}]", str(value), names.dns1123_subdomain(str(value)))
    return errors


def node_selector_term(term: dict[str, Any], path: str) -> Errors:
    errors: Errors = []
    operators = (*_SELECTOR_OPERATORS, "Gt", "Lt")
    for j, requirement in enumerate(term.get("matchExpressions") or ()):
        errors += _requirement(requirement, f"{path}.matchExpressions[{j}]", operators)
    for j, requirement in enumerate(term.get("matchFields") or ()):
        errors += _field_requirement(requirement, f"{path}.matchFields[{j}]")
    return errors


def node_selector(selector: dict[str, Any], path: str) -> Errors:
    terms = selector.get("nodeSelectorTerms") or []
    if not terms:
        return [required(f"{path}.nodeSelectorTerms", "must have at least one node selector term")]
    return [
        e for i, term in enumerate(terms) for e in node_selector_term(term, f"{path}.nodeSelectorTerms[{i}]")
    ]


def label_selector(selector: dict[str, Any] | None, path: str) -> Errors:
    if selector is None:
        return []
    errors = names.labels(f"{path}.matchLabels", selector.get("matchLabels") or {})
    for i, requirement in enumerate(selector.get("matchExpressions") or ()):
        errors += _requirement(requirement, f"{path}.matchExpressions[{i}]", _SELECTOR_OPERATORS)
    return errors


def tolerations(items: list[dict[str, Any]], path: str) -> Errors:
    errors: Errors = []
    for i, toleration in enumerate(items):
        here = f"{path}[{i}]"
        key, operator = str(toleration.get("key") or ""), toleration.get("operator") or ""
        value, effect = str(toleration.get("value") or ""), toleration.get("effect") or ""
        if key:
            errors += names.label_name(f"{here}.key", key)
        if not key and operator != "Exists":
            errors.append(
                invalid_value(
                    f"{here}.operator",
                    operator,
                    'operator must be Exists when `key` is empty, which means "match all values and all keys"',
                )
            )
        if toleration.get("tolerationSeconds") is not None and effect != "NoExecute":
            errors.append(
                invalid_value(
                    f"{here}.effect", effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"
                )
            )
        if operator in ("Equal", ""):
            problems = names.label_value(value)
            if problems:
                errors.append(invalid_value(f"{here}.operator", value, ";".join(problems)))
        elif operator == "Exists":
            if value:
                errors.append(
                    invalid_value(
                        f"{here}.operator", value, "value must be empty when `operator` is 'Exists'"
                    )
                )
        else:
            errors.append(not_supported(f"{here}.operator", operator, ("Equal", "Exists")))
        if effect and effect not in _TAINT_EFFECTS:
            errors.append(not_supported(f"{here}.effect", effect, _TAINT_EFFECTS))
    return errors


def taints(items: list[dict[str, Any]], path: str) -> Errors:
    errors: Errors = []
    seen: set[tuple[str, str]] = set()
    for i, taint in enumerate(items):
        here = f"{path}[{i}]"
        key, effect = str(taint.get("key") or ""), taint.get("effect") or ""
        errors += names.label_name(f"{here}.key", key)
        problems = names.label_value(str(taint.get("value") or ""))
        if problems:
            errors.append(invalid_value(f"{here}.value", taint.get("value") or "", ";".join(problems)))
        if not effect:
            errors.append(required(f"{here}.effect"))
        elif effect not in _TAINT_EFFECTS:
            errors.append(not_supported(f"{here}.effect", effect, _TAINT_EFFECTS))
        if (key, effect) in seen:
            errors.append(FieldError(DUPLICATE, here, taint, "taints must be unique by key and effect pair"))
        seen.add((key, effect))
    return errors


def _affinity_term(term: dict[str, Any], here: str) -> Errors:
    errors = label_selector(term.get("labelSelector"), f"{here}.labelSelector")
    errors += label_selector(term.get("namespaceSelector"), f"{here}.namespaceSelector")
    for namespace in term.get("namespaces") or ():
        errors += names.each(f"{here}.namespace", namespace, names.dns1123_label(namespace))
    topology = str(term.get("topologyKey") or "")
    if not topology:
        errors.append(required(f"{here}.topologyKey", "can not be empty"))
    return errors + names.label_name(f"{here}.topologyKey", topology)


def _affinity_terms(terms: list[dict[str, Any]], path: str) -> Errors:
    return [e for i, term in enumerate(terms) for e in _affinity_term(term, f"{path}[{i}]")]


def _weighted(terms: list[dict[str, Any]], path: str, inner: str) -> Errors:
    errors: Errors = []
    for i, term in enumerate(terms):
        weight = term.get("weight") or 0
        if not 1 <= weight <= 100:
            errors.append(invalid_value(f"{path}[{i}].weight", weight, "must be in the range 1-100"))
        if inner == "preference":
            errors += node_selector_term(term.get("preference") or {}, f"{path}[{i}].preference")
        else:
            errors += _affinity_term(term.get("podAffinityTerm") or {}, f"{path}[{i}].podAffinityTerm")
    return errors


def affinity(value: dict[str, Any], path: str) -> Errors:
    errors: Errors = []
    node = value.get("nodeAffinity") or {}
    required_terms = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required_terms is not None:
        errors += node_selector(
            required_terms, f"{path}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        )
    errors += _weighted(
        node.get("preferredDuringSchedulingIgnoredDuringExecution") or [],
        f"{path}.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution",
        "preference",
    )
    for kind in ("podAffinity", "podAntiAffinity"):
        block = value.get(kind) or {}
        here = f"{path}.{kind}"
        errors += _affinity_terms(
            block.get("requiredDuringSchedulingIgnoredDuringExecution") or [],
            f"{here}.requiredDuringSchedulingIgnoredDuringExecution",
        )
        errors += _weighted(
            block.get("preferredDuringSchedulingIgnoredDuringExecution") or [],
            f"{here}.preferredDuringSchedulingIgnoredDuringExecution",
            "podAffinityTerm",
        )
    return errors


def _pod_claims(claims: list[dict[str, Any]], path: str) -> tuple[Errors, set[str]]:
    errors: Errors = []
    seen: set[str] = set()
    for i, claim in enumerate(claims):
        here, name = f"{path}[{i}]", str(claim.get("name") or "")
        if not name:
            errors.append(required(f"{here}.name"))
        elif name in seen:
            errors.append(duplicate(f"{here}.name", name))
        else:
            errors += names.each(f"{here}.name", name, names.dns1123_label(name))
            seen.add(name)
        by_name, by_template = claim.get("resourceClaimName"), claim.get("resourceClaimTemplateName")
        if by_name is not None and by_template is not None:
            errors.append(
                invalid_value(
                    here,
                    claim,
                    "at most one of `resourceClaimName` or `resourceClaimTemplateName` may be specified",
                )
            )
        if by_name is None and by_template is None:
            errors.append(
                invalid_value(
                    here, claim, "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`"
                )
            )
        for field, value in (("resourceClaimName", by_name), ("resourceClaimTemplateName", by_template)):
            if value is not None:
                errors += names.each(f"{here}.{field}", str(value), names.dns1123_subdomain(str(value)))
    return errors, seen


def _container_claims(claims: list[dict[str, Any]], path: str, pod_claims: set[str]) -> Errors:
    errors: Errors = []
    for i, claim in enumerate(claims):
        name = str(claim.get("name") or "")
        if not name:
            errors.append(required(f"{path}[{i}]"))
        elif name not in pod_claims:
            listed = ": " + ", ".join(sorted(pod_claims)) if pod_claims else " which is empty"
            errors.append(
                not_found(
                    f"{path}[{i}]", name, "must be one of the names in pod.spec.resourceClaims" + listed
                )
            )
    return errors


def pod_spec(spec: dict[str, Any], path: str) -> Errors:
    errors, pod_claims = _pod_claims(spec.get("resourceClaims") or [], f"{path}.resourceClaims")
    containers = spec.get("containers") or []
    if not containers:
        errors.append(required(f"{path}.containers"))
    for field in ("initContainers", "containers"):
        seen: set[str] = set()
        for i, container in enumerate(spec.get(field) or ()):
            here, name = f"{path}.{field}[{i}]", str(container.get("name") or "")
            if not name:
                errors.append(required(f"{here}.name"))
            elif name in seen:
                errors.append(duplicate(f"{here}.name", name))
            else:
                errors += names.each(f"{here}.name", name, names.dns1123_label(name))
            seen.add(name)
            if not container.get("image"):
                errors.append(required(f"{here}.image"))
            claims = (container.get("resources") or {}).get("claims") or []
            errors += _container_claims(claims, f"{here}.resources.claims", pod_claims)
    errors += names.labels(f"{path}.nodeSelector", spec.get("nodeSelector") or {})
    errors += tolerations(spec.get("tolerations") or [], f"{path}.tolerations")
    if spec.get("affinity"):
        errors += affinity(spec["affinity"], f"{path}.affinity")
    return errors


def pod_template(template: dict[str, Any], path: str) -> Errors:
    return template_labels(template.get("metadata") or {}, f"{path}.metadata") + pod_spec(
        template.get("spec") or {}, f"{path}.spec"
    )


_HEALTH = ("Healthy", "Unhealthy", "Unknown")


def _resource_name(name: str, path: str, resources: dict[str, Any]) -> Errors:
    if name.startswith("claim:"):
        refs = {
            f"claim:{c.get('name')}" + (f"/{c['request']}" if c.get("request") else "")
            for c in resources.get("claims") or ()
        }
        if name in refs:
            return []
        detail = (
            "must match one of the container's resource claims in a format "
            "'claim:<claimName>/<request>' or 'claim:<claimName>' if request is empty"
        )
        return [invalid_value(path, name, detail)]
    if name in (resources.get("requests") or {}):
        return []
    return [invalid_value(path, name, "must match one of the container's resource requests")]


def _allocated_resources_status(
    statuses: list[dict[str, Any]], path: str, containers: list[dict[str, Any]]
) -> Errors:
    """validateContainerStatusAllocatedResourcesStatus: each entry names a claim (``claim:<name>`` or
    ``claim:<name>/<request>``) or a resource request of its container (a status of no container is not
    checked: kubernetes#124915); resource ids are unique within an entry and each health is a known one."""
    errors: Errors = []
    by_name = {c.get("name"): c for c in containers}
    for i, status in enumerate(statuses):
        container = by_name.get(status.get("name"))
        for j, entry in enumerate(status.get("allocatedResourcesStatus") or ()):
            here = f"{path}[{i}].allocatedResourcesStatus[{j}]"
            if container is not None:
                name = str(entry.get("name") or "")
                errors += _resource_name(name, f"{here}.name", container.get("resources") or {})
            seen: set[str] = set()
            for k, resource in enumerate(entry.get("resources") or ()):
                health, rid = str(resource.get("health") or ""), str(resource.get("resourceID") or "")
                if health not in _HEALTH:
                    errors.append(not_supported(f"{here}.resources[{k}].health", health, _HEALTH))
                if rid in seen:
                    errors.append(duplicate(f"{here}.resources[{k}].resourceID", rid))
                seen.add(rid)
    return errors


def pod_status(pod: dict[str, Any]) -> Errors:
    """What kube-apiserver checks of a pod's status on an update, of what the kubelets write: the device health
    in ``allocatedResourcesStatus``."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    return _allocated_resources_status(
        status.get("containerStatuses") or [], "status.containerStatuses", spec.get("containers") or []
    ) + _allocated_resources_status(
        status.get("initContainerStatuses") or [],
        "status.initContainerStatuses",
        spec.get("initContainers") or [],
    )
