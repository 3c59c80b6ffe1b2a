"""Pure: which ResourceClaims a pod waits on. Its ``spec.resourceClaims`` (named claims, and claims made from
templates once kube-controller-manager has made them) and, for extended resources backed by DRA (KEP-5004:
``nvidia.com/gpu: 2``, or ``deviceclass.resource.kubernetes.io/<class>: 1``), the one claim kube-scheduler makes
for the pod. kube-scheduler makes that claim only once a node fits, so a pod that fits nowhere has none: here it
is the claim kube-scheduler would make (a request ``container-<i>-request-<j>`` per container and resource, an
exactly-count request of the DeviceClass that maps the resource), which an explanation can examine like any
other. The embedded cluster's stand-in scheduler makes its claims from :func:`extended_requests` too."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from gpudra.api.core import Pod
from gpudra.api.dra import (
    DeviceClaim,
    DeviceRequest,
    ExactDeviceRequest,
    ResourceClaim,
    ResourceClaimSpec,
    ResourceClaimTemplate,
)
from gpudra.api.meta import ObjectMeta, OwnerReference
from gpudra.api.quantity import parse_quantity
from gpudra.errors import InvalidInputError

EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"

ClaimSource = Literal["named", "template", "extended"]


@dataclass(frozen=True)
class ExtendedRequest:
    container: str
    resource: str
    device_class: str
    count: int
    request: str  # the request name in the claim: container-<i>-request-<j>


@dataclass(frozen=True)
class PodClaim:
    """One claim of a pod: where it comes from, the name the pod knows it by, and the ResourceClaim's name (None
    while it is not made yet). ``implicit`` is the claim kube-scheduler would make for the pod's extended
    resources, while no such claim exists."""

    source: ClaimSource
    pod_claim: str  # spec.resourceClaims[].name, or the extended resources asked for, comma-joined
    name: str | None
    implicit: ResourceClaim | None = None


def extended_resource_classes(classes: Iterable[tuple[str, str | None]]) -> dict[str, str]:
    """extended resource name -> DeviceClass name, from (class name, its ``spec.extendedResourceName``): the
    explicit name and the implicit ``deviceclass.resource.kubernetes.io/<class>`` of every class."""
    mapping: dict[str, str] = {}
    for name, explicit in classes:
        mapping[IMPLICIT_PREFIX + name] = name
        if explicit:
            mapping[explicit] = name
    return mapping


def extended_requests(pod: Pod, mapping: Mapping[str, str]) -> list[ExtendedRequest]:
    """The container requests that DRA must serve, in container order (limits win over requests, as for GPUs).
    A quantity that is not a whole number (the API server refuses those for extended resources) is left out."""
    out: list[ExtendedRequest] = []
    for i, container in enumerate(pod.spec.containers):
        resources = container.resources
        wanted = {
            **((resources.requests if resources else None) or {}),
            **((resources.limits if resources else None) or {}),
        }
        for j, resource in enumerate(sorted(r for r in wanted if r in mapping)):
            count = _whole(wanted[resource])
            if count:
                request = ExtendedRequest(
                    container.name, resource, mapping[resource], count, f"container-{i}-request-{j}"
                )
                out.append(request)
    return out


def _whole(quantity: object) -> int:
    try:
        value = parse_quantity(quantity if isinstance(quantity, int) else str(quantity))
    except InvalidInputError:
        return 0
    return int(value) if value > 0 and value == Fraction(int(value)) else 0


def extended_claim_spec(requests: Iterable[ExtendedRequest]) -> ResourceClaimSpec:
    """The spec of the claim kube-scheduler makes for a pod's extended resources."""
    return ResourceClaimSpec(
        devices=DeviceClaim(
            requests=[
                DeviceRequest(
                    name=r.request,
                    exactly=ExactDeviceRequest(
                        device_class_name=r.device_class, allocation_mode="ExactCount", count=r.count
                    ),
                )
                for r in requests
            ]
        )
    )


_IMPLICIT = "implicit:"


def implicit_uid(pod_uid: str) -> str:
    """The uid of the claim kube-scheduler would make for a pod's extended resources (no real claim has it)."""
    return f"{_IMPLICIT}{pod_uid}"


def implicit_claim(pod: Pod, requests: Iterable[ExtendedRequest]) -> ResourceClaim:
    """The claim kube-scheduler would make for the pod's extended resources, named as its generated name starts
    (``<pod>-extended-resources``: no real claim has that name, the server appends a suffix), with the uid
    :func:`implicit_uid` gives."""
    meta = ObjectMeta(
        name=f"{(pod.metadata.name or '')[:40]}-extended-resources",
        namespace=pod.metadata.namespace or "default",
        uid=implicit_uid(pod.metadata.uid or ""),
        creation_timestamp=pod.metadata.creation_timestamp,
        annotations={EXTENDED_CLAIM_ANNOTATION: "true"},
    )
    return ResourceClaim(metadata=meta, spec=extended_claim_spec(requests))


def is_generated_for(claim: ObjectMeta, pod: Pod, pod_claim_name: str) -> bool:
    """Whether the claim (its metadata) was made for the pod's claim ``pod_claim_name``: annotated with that name
    and controlled by the pod."""
    return (claim.annotations or {}).get(POD_CLAIM_NAME_ANNOTATION) == pod_claim_name and _controlled_by(
        claim, pod
    )


def is_extended_claim_of(claim: ObjectMeta, pod: Pod) -> bool:
    """Whether the claim (its metadata) is the pod's claim for extended resources."""
    return (claim.annotations or {}).get(EXTENDED_CLAIM_ANNOTATION) == "true" and _controlled_by(claim, pod)


def _controlled_by(claim: ObjectMeta, pod: Pod) -> bool:
    return claim.namespace == pod.metadata.namespace and any(
        o.uid == pod.metadata.uid and o.controller for o in claim.owner_references or []
    )


def pod_claim_names(pod: Pod) -> dict[str, str | None]:
    """pod claim name -> ResourceClaim name, as the pod records it (None while a templated claim has not been
    recorded in its status yet)."""
    statuses = (
        {s.name: s.resource_claim_name for s in (pod.status.resource_claim_statuses or [])}
        if pod.status
        else {}
    )
    result: dict[str, str | None] = {}
    for pod_claim in pod.spec.resource_claims or []:
        if pod_claim.resource_claim_name:
            result[pod_claim.name] = pod_claim.resource_claim_name
        else:
            result[pod_claim.name] = statuses.get(pod_claim.name)
    return result


def pod_claims(pod: Pod, owned: Iterable[ObjectMeta], extended: Mapping[str, str]) -> list[PodClaim]:
    """Every claim the pod waits on, in spec order, the extended-resource claim last. ``owned``: the metadata of
    claims the pod owns (those made for it before its status records them count); ``extended``: what
    :func:`extended_resource_classes` maps."""
    owned = list(owned)
    claims: list[PodClaim] = []
    recorded = pod_claim_names(pod)
    for pod_claim in pod.spec.resource_claims or []:
        if pod_claim.resource_claim_name:
            claims.append(PodClaim("named", pod_claim.name, pod_claim.resource_claim_name))
            continue
        name = recorded.get(pod_claim.name) or next(
            (m.name for m in owned if is_generated_for(m, pod, pod_claim.name)), None
        )
        claims.append(PodClaim("template", pod_claim.name, name))
    requests = extended_requests(pod, extended)
    if requests:
        resources = ",".join(sorted({r.resource for r in requests}))
        made = next((m.name for m in owned if is_extended_claim_of(m, pod)), None) or _recorded_extended(pod)
        implicit = None if made else implicit_claim(pod, requests)
        claims.append(PodClaim("extended", resources, made, implicit))
    return claims


def _recorded_extended(pod: Pod) -> str | None:
    status = pod.status.extended_resource_claim_status if pod.status is not None else None
    return status.resource_claim_name if status is not None else None


def pod_owner(meta: ObjectMeta) -> OwnerReference | None:
    """The pod that controls the object (a claim made for it), if one does."""
    return next((o for o in meta.owner_references or [] if o.controller and o.kind == "Pod"), None)


def waiting_pod_of(claim: ObjectMeta, pods: Iterable[Pod]) -> Pod | None:
    """Of ``pods``, the one the claim is for: the pod that controls it (a template's or an extended-resource
    claim), the pod an imagined claim (:func:`implicit_claim`) stands for, else the first by name that names it in
    ``spec.resourceClaims``."""
    owner = pod_owner(claim)
    uids = {owner.uid} if owner is not None else set()
    if claim.uid and claim.uid.startswith(_IMPLICIT):
        uids.add(claim.uid.removeprefix(_IMPLICIT))
    mine = [p for p in pods if p.metadata.namespace == claim.namespace]
    found = next((p for p in mine if p.metadata.uid in uids), None)
    if found is not None or uids:
        return found
    naming = [
        p for p in mine if any(c.resource_claim_name == claim.name for c in p.spec.resource_claims or [])
    ]
    return min(naming, key=lambda p: p.metadata.name or "", default=None)


def owned_by_pods(claims: Iterable[ObjectMeta]) -> dict[str, list[ObjectMeta]]:
    """pod uid -> the metadata of the claims that pod controls."""
    owned: dict[str, list[ObjectMeta]] = {}
    for meta in claims:
        owner = pod_owner(meta)
        if owner is not None:
            owned.setdefault(owner.uid, []).append(meta)
    return owned


def implicit_claims(
    pods: Iterable[Pod], claims: Iterable[ObjectMeta], extended: Mapping[str, str]
) -> list[ResourceClaim]:
    """The claims kube-scheduler would make for the extended resources of the pods that wait and have no such
    claim yet (``claims``: the metadata of the claims that exist)."""
    owned = owned_by_pods(claims)
    out = []
    for pod in pods:
        if may_wait_on_claims(pod):
            wanted = pod_claims(pod, owned.get(pod.metadata.uid or "", []), extended)
            out += [c.implicit for c in wanted if c.implicit is not None]
    return out


def may_wait_on_claims(pod: Pod, *, gated: bool = False) -> bool:
    """Whether the pod waits for the scheduler (not bound, not gated unless ``gated``, not being deleted, not
    finished) and may wait on claims: it has claims, or asks for a domain-qualified resource (which a DeviceClass
    may map)."""
    status = pod.status.phase if pod.status is not None else None
    if pod.spec.node_name or pod.metadata.deletion_timestamp or (pod.spec.scheduling_gates and not gated):
        return False
    if status not in (None, "", "Pending"):
        return False
    if pod.spec.resource_claims:
        return True
    for container in pod.spec.containers:
        resources = container.resources
        names = {
            *((resources.requests or {}) if resources else {}),
            *((resources.limits or {}) if resources else {}),
        }
        if any("/" in name for name in names):
            return True
    return False


def claim_from_template(pod: Pod, pod_claim: str, template: ResourceClaimTemplate) -> ResourceClaim:
    """The claim kube-controller-manager would make from ``template`` for the pod's entry ``pod_claim`` (named as
    it names them, ``<pod>-<entry>-``, with its random suffix left out)."""
    meta = template.spec.metadata
    return ResourceClaim(
        metadata=ObjectMeta(
            name=f"{pod.metadata.name}-{pod_claim}",
            namespace=pod.metadata.namespace or "default",
            labels=(meta.labels if meta else None),
            annotations=(meta.annotations if meta else None),
        ),
        spec=template.spec.spec,
    )
