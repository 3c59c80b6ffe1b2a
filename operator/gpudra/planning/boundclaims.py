"""A pending claim no scheduler will allocate: the pod it was made for is bound to a node already. kube-scheduler
allocates a pod's claims only while it schedules the pod, so such a claim waits on nothing. It is the claim of a pod
created with ``spec.nodeName`` set, or one kube-controller-manager made twice for the same entry of a pod
(kube-apiserver died between storing the first and answering) and named in the pod's status after the scheduler had
allocated the first for the pod (kubernetes/kubernetes#140217). The controller's Event and ``gpudra explain`` say
the same words."""

from __future__ import annotations

from collections.abc import Iterable

from gpudra.api.meta import ObjectMeta
from gpudra.planning.podclaims import POD_CLAIM_NAME_ANNOTATION, pod_owner

BOUND_REASON = "PodAlreadyBound"


def bound_pod_words(pod: str, node: str, first: str | None) -> str:
    """What is said of such a claim; ``pod``: namespace/name; ``first``: the claim made before it for the same entry
    of the pod, allocated, if there is one."""
    who = f"pod {pod} is bound to node {node}"
    if first:
        return (
            f"{who} with claim {first}, which kube-controller-manager made for the same entry of the pod before this"
            " one (it made the entry's claim twice, kubernetes/kubernetes#140217): this claim will never be"
            " allocated and goes with the pod"
        )
    return (
        f"{who} and this claim is not allocated: kube-scheduler allocates a pod's claims only while it schedules"
        " the pod, so a pod created with spec.nodeName set never gets them and the kubelet cannot start it; create"
        " the pod without spec.nodeName (a nodeSelector on kubernetes.io/hostname still picks the node)"
    )


def first_of_entry(claim: ObjectMeta, others: Iterable[tuple[ObjectMeta, bool]]) -> str | None:
    """The name of another claim the same pod controls, made for the same entry (``others``: claims' metadata, of
    the claim's namespace, and whether each is allocated), that is allocated; None when there is none."""
    entry = (claim.annotations or {}).get(POD_CLAIM_NAME_ANNOTATION)
    owner = pod_owner(claim)
    if entry is None or owner is None:
        return None
    for meta, allocated in others:
        other = pod_owner(meta)
        if (
            allocated
            and meta.name != claim.name
            and other is not None
            and other.uid == owner.uid
            and (meta.annotations or {}).get(POD_CLAIM_NAME_ANNOTATION) == entry
        ):
            return meta.name
    return None
