"""resource.k8s.io/v1 validation of claims, claim templates and DeviceClasses, as kube-apiserver does it
(``pkg/apis/resource/validation``): what the OpenAPI schema cannot say.

A request has exactly one of ``exactly`` and ``firstAvailable``; request and subrequest names are unique DNS
labels; ``deviceClassName`` is required; ``count`` is positive in ExactCount mode and absent in All mode;
constraints and configs name requests that exist; attribute names are qualified; every CEL selector compiles
(the error at ``...selectors[i].cel.expression``, with line, column and a caret as kube-apiserver prints it),
``includes()`` only where the expression is stored or DRAListTypeAttributes is on (see ``selector``), and its
estimated cost is within kube-apiserver's limit (``allocator/celcost.py``: "too complex, exceeds cost limit");
opaque parameters are a JSON object of at most 10 KiB. The defaults Kubernetes sets before it validates
(allocationMode ExactCount, count 1, toleration operator Equal) are set here too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from gpudra.allocator import (
    MAX_EXPRESSION_LENGTH,
    CelCompileError,
    CelCostError,
    CelResultTypeError,
    check_new_selector,
)

from . import names
from .fielderrors import (
    FieldError,
    Literal,
    duplicate,
    forbidden,
    invalid_value,
    not_supported,
    required,
    too_long,
    too_many,
)

REQUESTS_MAX = 32
SUBREQUESTS_MAX = 8
SELECTORS_MAX = 32
CONSTRAINTS_MAX = 32
CONFIGS_MAX = 32
OPAQUE_MAX = 10 * 1024
_MODES = ("All", "ExactCount")
_EFFECTS = ("NoExecute", "NoSchedule")
_OPERATORS = ("Equal", "Exists")
_REF_ERROR = (
    "must be the name of a request in the claim or the name of a request and a subrequest separated by '/'"
)

Errors = list[FieldError]


def listed(items: Any, limit: int, path: str, check: Callable[[Any, str], Errors]) -> Errors:
    """Every item checked, then at most ``limit`` items (Kubernetes' validateSlice)."""
    items = items if isinstance(items, list) else []
    errors: Errors = []
    for i, item in enumerate(items):
        errors += check(item, f"{path}[{i}]")
    if 0 <= limit < len(items):
        errors.append(too_many(path, len(items), limit))
    return errors


def unique(items: Any, path: str, key: Callable[[Any], Any], field: str = "") -> Errors:
    """Duplicate keys after the first (Kubernetes' validateSet)."""
    seen: set[Any] = set()
    errors: Errors = []
    for i, item in enumerate(items if isinstance(items, list) else []):
        value = key(item)
        if value in seen:
            errors.append(duplicate(f"{path}[{i}].{field}" if field else f"{path}[{i}]", value))
        seen.add(value)
    return errors


# ---- defaults ----------------------------------------------------------------------------------------------
def _default_request(exact: dict[str, Any]) -> None:
    exact.setdefault("allocationMode", "ExactCount")
    if exact["allocationMode"] == "ExactCount" and not exact.get("count"):
        exact["count"] = 1
    for toleration in exact.get("tolerations") or ():
        if isinstance(toleration, dict) and not toleration.get("operator"):
            toleration["operator"] = "Equal"


def default_claim_spec(spec: dict[str, Any]) -> None:
    """Set what Kubernetes defaults in a claim spec (in place)."""
    for request in (spec.get("devices") or {}).get("requests") or ():
        if isinstance(request.get("exactly"), dict):
            _default_request(request["exactly"])
        for sub in request.get("firstAvailable") or ():
            if isinstance(sub, dict):
                _default_request(sub)


# ---- selectors ---------------------------------------------------------------------------------------------
def compile_failure(expression: str, error: CelCompileError) -> str:
    """kube-apiserver's words for a selector that does not compile, or gives another type than bool."""
    if isinstance(error, CelResultTypeError):
        return f"must evaluate to bool or the unknown type, not {error.result_type}"
    if not error.line:
        return f"compilation failed: {error}"
    text = expression.split("\n")[error.line - 1]
    return f"compilation failed: ERROR: {error}\n | {text}\n | {'.' * (error.column - 1)}^"


def selector(item: Any, path: str, includes: bool) -> Errors:
    """One selector. ``includes``: whether ``includes()`` compiles, as in kube-apiserver's CEL environment for
    this expression: always for an expression already stored (its "stored expressions" environment), for a new or
    changed one only with DRAListTypeAttributes on (its "new expressions" environment lacks it otherwise)."""
    cel = item.get("cel") if isinstance(item, dict) else None
    if not isinstance(cel, dict):
        return [required(f"{path}.cel")]
    expression = str(cel.get("expression") or "")
    here = f"{path}.cel.expression"
    if len(expression) > MAX_EXPRESSION_LENGTH:
        return [too_long(here, MAX_EXPRESSION_LENGTH)]
    try:
        check_new_selector(expression, list_attributes=includes)
    except CelCostError:
        return [forbidden(here, "too complex, exceeds cost limit")]
    except CelCompileError as error:
        return [invalid_value(here, expression, compile_failure(expression, error))]
    return []


def selectors(items: Any, path: str, includes: bool) -> Errors:
    return listed(items, SELECTORS_MAX, path, lambda item, p: selector(item, p, includes))


# ---- requests ----------------------------------------------------------------------------------------------
def _toleration(item: dict[str, Any], path: str) -> Errors:
    errors: Errors = []
    key, operator, value = (
        str(item.get("key") or ""),
        item.get("operator") or "",
        str(item.get("value") or ""),
    )
    if key:
        errors += names.label_name(f"{path}.key", key)
    if operator == "Exists":
        if value:
            errors.append(invalid_value(f"{path}.value", value, "must be empty for operator `Exists`"))
    elif operator == "Equal":
        errors += names.each(f"{path}.value", value, names.label_value(value))
    elif not operator:
        errors.append(required(f"{path}.operator"))
    else:
        errors.append(not_supported(f"{path}.operator", operator, _OPERATORS))
    effect = item.get("effect") or ""
    if effect and effect not in _EFFECTS:
        errors.append(not_supported(f"{path}.effect", effect, _EFFECTS))
    return errors


def _device_class(name: str, path: str) -> Errors:
    return [required(path)] if not name else names.each(path, name, names.dns1123_subdomain(name))


def _exact(request: dict[str, Any], path: str, includes: bool) -> Errors:
    errors = _device_class(str(request.get("deviceClassName") or ""), f"{path}.deviceClassName")
    errors += selectors(request.get("selectors"), f"{path}.selectors", includes)
    mode, count = request.get("allocationMode"), request.get("count") or 0
    if mode == "All":
        if count != 0:
            errors.append(
                invalid_value(f"{path}.count", count, "must not be specified when allocationMode is 'All'")
            )
    elif mode == "ExactCount":
        if count <= 0:
            errors.append(invalid_value(f"{path}.count", count, "must be greater than zero"))
    else:
        errors.append(not_supported(f"{path}.allocationMode", mode or "", _MODES))
    for i, toleration in enumerate(request.get("tolerations") or ()):
        errors += _toleration(toleration, f"{path}.tolerations[{i}]")
    return errors


def _subrequest(sub: dict[str, Any], path: str, includes: bool) -> Errors:
    name = str(sub.get("name") or "")
    return names.each(f"{path}.name", name, names.dns1123_label(name)) + _exact(sub, path, includes)


def _request(request: dict[str, Any], path: str, includes: bool) -> Errors:
    name = str(request.get("name") or "")
    errors = names.each(f"{path}.name", name, names.dns1123_label(name))
    first, exact = request.get("firstAvailable") or [], request.get("exactly")
    if first:
        errors += listed(
            first, SUBREQUESTS_MAX, f"{path}.firstAvailable", lambda s, p: _subrequest(s, p, includes)
        )
        errors += unique(first, f"{path}.firstAvailable", lambda s: s.get("name", ""), "name")
    if isinstance(exact, dict):
        errors += _exact(exact, f"{path}.exactly", includes)
    kinds = bool(first) + isinstance(exact, dict)
    if kinds == 0:
        errors.append(required(path, "exactly one of `exactly` or `firstAvailable` is required"))
    elif kinds == 2:
        errors.append(
            invalid_value(
                path,
                Literal("null"),
                "exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set",
            )
        )
    return errors


# ---- references, constraints, configs ----------------------------------------------------------------------
def request_names(devices: dict[str, Any]) -> dict[str, set[str] | None]:
    found: dict[str, set[str] | None] = {}
    for request in devices.get("requests") or ():
        first = request.get("firstAvailable") or []
        found[str(request.get("name") or "")] = {str(s.get("name") or "") for s in first} if first else None
    return found


def reference(name: str, path: str, known: dict[str, set[str] | None]) -> Errors:
    segments = name.split("/")
    if len(segments) > 2:
        return [invalid_value(path, name, _REF_ERROR)]
    errors: Errors = []
    for segment in segments:
        errors += names.each(path, segment, names.dns1123_label(segment))
    subs = known.get(segments[0])
    found = segments[0] in known and (len(segments) == 1 or (subs is not None and segments[1] in subs))
    if not found:
        errors.append(invalid_value(path, name, _REF_ERROR))
    return errors


def references(items: Any, path: str, known: dict[str, set[str] | None]) -> Errors:
    errors = listed(items, REQUESTS_MAX, path, lambda n, p: reference(str(n), p, known))
    return errors + unique(items, path, str)


def fully_qualified(name: str, path: str) -> Errors:
    errors = qualified(name, path)
    if name and "/" not in name:
        errors.append(invalid_value(path, name, "must include a domain"))
    return errors


def qualified(name: str, path: str) -> Errors:
    """A device attribute or capacity name: a C identifier of at most 32, with an optional domain."""
    if not name:
        return [required(path, "name required")]
    parts = name.split("/")
    errors: Errors = []
    identifier = parts[-1]
    if len(parts) == 2:
        domain = parts[0]
        errors += (
            [required(path, "the domain must not be empty")]
            if not domain
            else names.driver_name(path, domain)
        )
        if not identifier:
            return [*errors, required(path, "the name must not be empty")]
    elif len(parts) > 2:
        return errors
    if len(identifier) > 32:
        errors.append(too_long(path, 32))
    return errors + names.each(path, identifier, names.c_identifier(identifier))


def _constraint(item: dict[str, Any], path: str, known: dict[str, set[str] | None]) -> Errors:
    errors = references(item.get("requests"), f"{path}.requests", known)
    if item.get("matchAttribute") is not None:
        return errors + fully_qualified(str(item["matchAttribute"]), f"{path}.matchAttribute")
    if item.get("distinctAttribute") is not None:
        return errors + fully_qualified(str(item["distinctAttribute"]), f"{path}.distinctAttribute")
    return [
        *errors,
        required(
            path,
            'exactly one of "matchAttribute" or "distinctAttribute" is required, but multiple fields are set',
        ),
    ]


def opaque_config(item: dict[str, Any], path: str) -> Errors:
    opaque = item.get("opaque")
    if not isinstance(opaque, dict):
        return [required(f"{path}.opaque")]
    errors = names.driver_name(f"{path}.opaque.driver", str(opaque.get("driver") or ""))
    here, parameters = f"{path}.opaque.parameters", opaque.get("parameters")
    if parameters is None:
        errors.append(required(here))
    elif len(json.dumps(parameters, separators=(",", ":"))) > OPAQUE_MAX:
        errors.append(too_long(here, OPAQUE_MAX))
    elif not isinstance(parameters, dict):
        errors.append(invalid_value(here, "<value omitted>", "must be a valid JSON object"))
    return errors


def claim_spec(spec: dict[str, Any], path: str, includes: bool) -> Errors:
    """A claim's (or a claim template's) spec; ``includes`` as for ``selector``."""
    devices = spec.get("devices") or {}
    here = f"{path}.devices"
    known = request_names(devices)
    requests = devices.get("requests")
    errors = listed(requests, REQUESTS_MAX, f"{here}.requests", lambda r, p: _request(r, p, includes))
    errors += unique(requests, f"{here}.requests", lambda r: r.get("name", ""), "name")
    errors += listed(
        devices.get("constraints"),
        CONSTRAINTS_MAX,
        f"{here}.constraints",
        lambda c, p: _constraint(c, p, known),
    )

    def config(item: dict[str, Any], p: str) -> Errors:
        return references(item.get("requests"), f"{p}.requests", known) + opaque_config(item, p)

    return errors + listed(devices.get("config"), CONFIGS_MAX, f"{here}.config", config)


def class_spec(spec: dict[str, Any], includes: bool) -> Errors:
    """A DeviceClass's spec; ``includes`` as for ``selector``."""
    errors = selectors(spec.get("selectors"), "spec.selectors", includes)
    errors += listed(spec.get("config"), CONFIGS_MAX, "spec.config", opaque_config)
    extended = spec.get("extendedResourceName")
    if extended is not None and not _extended_resource_name(str(extended)):
        errors.append(
            invalid_value("spec.extendedResourceName", extended, "must be a valid extended resource name")
        )
    return errors


def _extended_resource_name(name: str) -> bool:
    if "/" not in name or name.startswith(("kubernetes.io/", "requests.")) or "kubernetes.io/" in name:
        return False
    return not names.qualified_name(name) and not names.qualified_name(f"requests.{name}")


def immutable(path: str, new: Any, old: Any) -> Errors:
    return [] if new == old else [invalid_value(path, new, "field is immutable")]


def forbid_new_reservations(path: str) -> FieldError:
    return forbidden(
        path, "new entries may not be added while `deallocationRequested` or `deletionTimestamp` are set"
    )


ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"


def admin_access(devices: Any, labels: dict[str, str]) -> Errors:
    """A request with ``adminAccess: true`` needs the label ``resource.kubernetes.io/admin-access: "true"`` on its
    namespace (kube-apiserver checks it when a claim or a template is created; the field path lacks ``exactly``,
    and a template's lacks its outer ``spec``, as kube-apiserver words it)."""
    if labels.get(ADMIN_ACCESS_LABEL) == "true" or not isinstance(devices, dict):
        return []
    return [
        forbidden(
            f"spec.devices.requests[{i}].adminAccess",
            f"admin access to devices requires the `{ADMIN_ACCESS_LABEL}: true` label on the containing namespace",
        )
        for i, request in enumerate(devices.get("requests") or [])
        if isinstance(request, dict) and ((request.get("exactly") or {}).get("adminAccess") is True)
    ]
