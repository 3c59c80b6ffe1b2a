"""Kubernetes' allocator's own words for the errors that abort a pod's scheduling attempt (k8s.io/dynamic-resource-
allocation/structured, v0.37): a CEL selector failing at runtime on a device the search reaches, and an ``All``
request meeting a constraint it breaks or (through 1.37, see :func:`pool_error_aborts`) a pool that is incomplete
or invalid. kube-scheduler's FailedScheduling Event carries them behind :data:`FILTER_PREFIX`; the stand-in
scheduler says the same."""

from __future__ import annotations

from gpudra.allocator.requests import RequestSpec

FILTER_PREFIX = 'running "DynamicResources" filter plugin: '
"""What kube-scheduler puts before a filter plugin's error (framework.RunFilterPlugins)."""

_NO_SUCH_KEY_HINT = (
    ". consider using CEL optional chaining (.? followed by orValue()) or guarding the check with has() for "
    "optional fields"
)


def _cel_go(error: str) -> str:
    """gpudra's CEL runtime error as cel-go words the forms known to differ (others are kept as they are)."""
    if error.startswith("no such overload"):
        return "no such overload"
    if error.startswith("selector returned string "):
        return (
            "CEL result of type string could not be converted to bool: unsupported native conversion from string "
            "to 'bool'"
        )
    if "no such key:" in error:
        return error + _NO_SUCH_KEY_HINT
    return error


def _request_name(spec: RequestSpec) -> str:
    """The request's name as Kubernetes' messages give it: a firstAvailable subrequest by its own name."""
    return spec.full.rsplit("/", 1)[-1]


def cel_runtime(claim: str, spec: RequestSpec | None, expression: str, device: str, error: str) -> str:
    """A selector's runtime error: a class selector is named by its class, a request's by its claim, each by its
    position among its own selectors (``error`` without gpudra's hint; "no such key" gets Kubernetes' advice)."""
    error = _cel_go(error)
    if spec is not None:
        for i, selector in enumerate(spec.class_selectors):
            if selector.expression == expression:
                return (
                    f"class {spec.class_name}: selector #{i} on device {device}: CEL runtime error: {error}"
                )
        for i, selector in enumerate(spec.request_selectors):
            if selector.expression == expression:
                return f"claim {claim}: selector #{i} on device {device}: CEL runtime error: {error}"
    return f"claim {claim}: selector on device {device}: CEL runtime error: {error}"


POOL_ERROR_FAILS_NODE_FROM = 38
"""The first Kubernetes minor in which an ``All`` request meeting an incomplete or invalid pool fails only that node
(kubernetes#141898, in v0.38.0-beta.0: the error wraps ``ErrFailedAllocationOnNode``, so kube-scheduler's filter
calls the node unschedulable, in the same words, and goes on with the other nodes). Selector runtime errors and an
``All`` request breaking a constraint still abort the attempt."""


def pool_error_aborts(kube_minor: int) -> bool:
    """Whether an ``All`` request meeting an incomplete or invalid pool aborts the pod's scheduling attempt on
    Kubernetes 1.``kube_minor`` (otherwise it fails only the node)."""
    return kube_minor < POOL_ERROR_FAILS_NODE_FROM


def all_mode_pool(claim: str, spec: RequestSpec, pool: str, *, invalid: bool) -> str:
    state = "currently invalid" if invalid else "currently being updated"
    return f"claim {claim}, request {_request_name(spec)}: asks for all devices, but resource pool {pool} is {state}"


def all_mode_constraint(claim: str, spec: RequestSpec, device: str) -> str:
    return (
        f"claim {claim}, request {_request_name(spec)}: cannot add device {device} because a claim constraint "
        "would not be satisfied"
    )
