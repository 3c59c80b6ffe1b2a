"""Which claims a pod waits on (``gpudra.planning.podclaims``): named claims, claims from templates (recorded in the
pod's status, or found among the claims it owns), and for extended resources backed by DRA the claim kube-scheduler
makes, or, before it has made one, the claim it would make."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.api.core import Pod
from gpudra.api.meta import ObjectMeta
from gpudra.planning.podclaims import (
    extended_resource_classes,
    implicit_claims,
    may_wait_on_claims,
    pod_claims,
    waiting_pod_of,
)

MAPPING = extended_resource_classes(
    [("gpu.nvidia.com", "nvidia.com/gpu"), ("mig-1g-12gb.gpu.nvidia.com", "nvidia.com/mig-1g.12gb"),
     ("mig.nvidia.com", None)]
)  # fmt: skip
UID = "pod-uid"


def pod(containers: list[dict[str, Any]] | None = None, **spec: Any) -> Pod:
    status = spec.pop("status", None)
    body: dict[str, Any] = {
        "metadata": {"name": "trainer", "namespace": "ml", "uid": UID},
        "spec": {"containers": containers or [{"name": "main"}], **spec},
    }
    if status is not None:
        body["status"] = status
    return Pod.model_validate(body)


def limits(resources: dict[str, Any]) -> dict[str, Any]:
    return {"name": "main", "resources": {"limits": resources}}


def owned(name: str, annotations: dict[str, str], owner: str = UID, namespace: str = "ml") -> ObjectMeta:
    return ObjectMeta.model_validate(
        {"name": name, "namespace": namespace, "annotations": annotations,
         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "trainer", "uid": owner, "controller": True}]}
    )  # fmt: skip


EXTENDED = {"resource.kubernetes.io/extended-resource-claim": "true"}
TEMPLATED = {"resource.kubernetes.io/pod-claim-name": "gpus"}
TEMPLATE_CLAIM = [{"name": "gpus", "resourceClaimTemplateName": "eight-gpus"}]


@pytest.mark.parametrize(
    ("case", "the_pod", "claims_owned", "expected"),
    [
        (
            "named claim",
            pod(resourceClaims=[{"name": "gpus", "resourceClaimName": "shared"}]),
            [],
            [("named", "gpus", "shared")],
        ),
        (
            "template claim recorded in the pod's status",
            pod(
                resourceClaims=TEMPLATE_CLAIM,
                status={
                    "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "trainer-gpus-x7k9m"}]
                },
            ),
            [],
            [("template", "gpus", "trainer-gpus-x7k9m")],
        ),
        (
            "template claim made, not yet recorded",
            pod(resourceClaims=TEMPLATE_CLAIM),
            [owned("trainer-gpus-abcde", TEMPLATED)],
            [("template", "gpus", "trainer-gpus-abcde")],
        ),
        ("template claim not made yet", pod(resourceClaims=TEMPLATE_CLAIM), [], [("template", "gpus", None)]),
        (
            "another pod's claim is not this pod's",
            pod(resourceClaims=TEMPLATE_CLAIM),
            [owned("other-gpus-abcde", TEMPLATED, owner="other")],
            [("template", "gpus", None)],
        ),
        (
            "extended resource, claim made",
            pod([limits({"nvidia.com/gpu": 2})]),
            [owned("trainer-extended-resources-q2w3e", EXTENDED)],
            [("extended", "nvidia.com/gpu", "trainer-extended-resources-q2w3e")],
        ),
        (
            "extended resource, claim recorded in the pod's status",
            pod(
                [limits({"nvidia.com/gpu": 2})],
                status={"extendedResourceClaimStatus": {"resourceClaimName": "trainer-extended-resources-z"}},
            ),
            [],
            [("extended", "nvidia.com/gpu", "trainer-extended-resources-z")],
        ),
        (
            "extended resource, no claim yet",
            pod([limits({"nvidia.com/gpu": 2})]),
            [],
            [("extended", "nvidia.com/gpu", None)],
        ),
        ("a resource no class maps", pod([limits({"example.com/fpga": 1})]), [], []),
        (
            "claims and extended resources",
            pod([limits({"nvidia.com/gpu": 1})], resourceClaims=TEMPLATE_CLAIM),
            [],
            [("template", "gpus", None), ("extended", "nvidia.com/gpu", None)],
        ),
    ],
)
def test_the_claims_a_pod_waits_on(
    case: str, the_pod: Pod, claims_owned: list[ObjectMeta], expected: list[tuple[str, str, str | None]]
) -> None:
    found = pod_claims(the_pod, claims_owned, MAPPING)
    assert [(c.source, c.pod_claim, c.name) for c in found] == expected, case
    assert all((c.implicit is None) == (c.name is not None) for c in found if c.source == "extended")


def _requests(the_pod: Pod) -> list[tuple[str, str, str | None, int | None]]:
    (claim,) = [c.implicit for c in pod_claims(the_pod, [], MAPPING) if c.implicit is not None]
    assert claim.metadata.namespace == "ml"
    assert claim.metadata.annotations == EXTENDED
    out: list[tuple[str, str, str | None, int | None]] = []
    for r in claim.spec.devices.requests or []:
        assert r.exactly is not None
        out.append((r.name, r.exactly.device_class_name, r.exactly.allocation_mode, r.exactly.count))
    return out


@pytest.mark.parametrize(
    ("case", "containers", "expected"),
    [
        ("NVIDIA's extended-resources/mig-1g-12gb spec", [limits({"nvidia.com/mig-1g.12gb": 1})],
         [("container-0-request-0", "mig-1g-12gb.gpu.nvidia.com", "ExactCount", 1)]),
        ("the count is the quantity asked for", [limits({"nvidia.com/gpu": "4"})],
         [("container-0-request-0", "gpu.nvidia.com", "ExactCount", 4)]),
        ("every class's implicit name",
         [limits({"deviceclass.resource.kubernetes.io/mig.nvidia.com": 2})],
         [("container-0-request-0", "mig.nvidia.com", "ExactCount", 2)]),
        ("a request per container and resource",
         [limits({"nvidia.com/gpu": 1}), {"name": "side", "resources": {"requests": {"nvidia.com/gpu": 2,
          "nvidia.com/mig-1g.12gb": 3}}}],
         [("container-0-request-0", "gpu.nvidia.com", "ExactCount", 1),
          ("container-1-request-0", "gpu.nvidia.com", "ExactCount", 2),
          ("container-1-request-1", "mig-1g-12gb.gpu.nvidia.com", "ExactCount", 3)]),
        ("limits win over requests",
         [{"name": "main", "resources": {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 3}}}],
         [("container-0-request-0", "gpu.nvidia.com", "ExactCount", 3)]),
        ("a quantity that is not a whole number is left out",
         [limits({"nvidia.com/gpu": "500m"}), {"name": "side", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
         [("container-1-request-0", "gpu.nvidia.com", "ExactCount", 1)]),
    ],
)  # fmt: skip
def test_the_claim_kube_scheduler_would_make(
    case: str, containers: list[dict[str, Any]], expected: list[tuple[str, str, str, int]]
) -> None:
    assert _requests(pod(containers)) == expected, case


@pytest.mark.parametrize(
    ("case", "the_pod", "waits"),
    [
        ("unbound with claims", pod(resourceClaims=TEMPLATE_CLAIM), True),
        ("unbound asking for a qualified resource", pod([limits({"nvidia.com/gpu": 1})]), True),
        ("unbound asking for cpu only", pod([{"name": "main", "resources": {"limits": {"cpu": "1"}}}]), False),
        ("bound", pod(resourceClaims=TEMPLATE_CLAIM, nodeName="dgx-h100-0"), False),
        ("gated", pod(resourceClaims=TEMPLATE_CLAIM, schedulingGates=[{"name": "kueue"}]), False),
        ("failed", pod(resourceClaims=TEMPLATE_CLAIM, status={"phase": "Failed"}), False),
    ],
)  # fmt: skip
def test_which_pods_may_wait_on_claims(case: str, the_pod: Pod, waits: bool) -> None:
    assert may_wait_on_claims(the_pod) is waits, case


def test_only_waiting_pods_without_their_claim_get_an_implicit_one() -> None:
    waiting = pod([limits({"nvidia.com/gpu": 1})])
    served = Pod.model_validate(
        {**waiting.to_wire(), "metadata": {"name": "served", "namespace": "ml", "uid": "u2"}}
    )
    bound = Pod.model_validate(
        {**waiting.to_wire(), "metadata": {"name": "bound", "namespace": "ml", "uid": "u3"}}
    )
    bound.spec.node_name = "dgx-h100-0"
    made = owned("served-extended-resources-x", EXTENDED, owner="u2")
    (claim,) = implicit_claims([waiting, served, bound], [made], MAPPING)
    assert (claim.metadata.namespaced_name, claim.metadata.uid) == (
        "ml/trainer-extended-resources",
        "implicit:pod-uid",
    )


def test_the_pod_a_claim_is_for() -> None:
    """The web view explains a pending claim over the nodes its pod may go to: which pod is that."""
    trainer = pod(
        [limits({"nvidia.com/gpu": 1})], resourceClaims=[{"name": "spare", "resourceClaimName": "one-gpu"}]
    )
    other = Pod.model_validate(
        {**trainer.to_wire(), "metadata": {"name": "another", "namespace": "ml", "uid": "u2"}}
    )
    elsewhere = Pod.model_validate(
        {**trainer.to_wire(), "metadata": {"name": "a-pod", "namespace": "other", "uid": "u3"}}
    )
    pods = [trainer, other, elsewhere]
    assert waiting_pod_of(owned("trainer-gpus-x", TEMPLATED), pods) is trainer  # controlled by it
    (imagined,) = implicit_claims([trainer], [], MAPPING)
    assert waiting_pod_of(imagined.metadata, pods) is trainer  # the claim kube-scheduler would make for it
    named = ObjectMeta(name="one-gpu", namespace="ml")
    assert waiting_pod_of(named, pods) is other  # both name it: the first by name, in the claim's namespace
    assert (
        waiting_pod_of(owned("gone-gpus-x", TEMPLATED, owner="gone"), pods) is None
    )  # its pod is not waiting
    assert waiting_pod_of(ObjectMeta(name="unused", namespace="ml"), pods) is None
