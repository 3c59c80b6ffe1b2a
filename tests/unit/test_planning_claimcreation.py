"""Why kube-controller-manager has not made a pod's claim from its template, as `gpudra explain pod` says it: the
newest of its Warnings for that entry of this pod, and where to look when a quota refused the claim."""

from __future__ import annotations

from typing import Any

from gpudra.api.core import Pod
from gpudra.api.meta import ObjectMeta
from gpudra.planning.claimcreation import (
    UnmadeClaim,
    creation_warning,
    not_created_words,
    unmade_claims,
    unmade_words,
)
from gpudra.planning.podwarnings import PodWarning

POD = Pod.model_validate({"metadata": {"name": "big", "namespace": "team", "uid": "u2"}, "spec": {}})
QUOTA = (
    'PodResourceClaim gpus: create ResourceClaim : resourceclaims.resource.k8s.io "big-gpus-x" is forbidden:'
    " exceeded quota: gpus, requested: gpu.nvidia.com.deviceclass.resource.k8s.io/devices=4"
)


def _event(
    message: str, last: str, *, uid: str = "u2", count: int = 1, kind: str = "Warning"
) -> dict[str, Any]:
    return {
        "type": kind,
        "reason": "FailedResourceClaimCreation",
        "involvedObject": {"kind": "Pod", "name": "big", "uid": uid},
        "message": message,
        "count": count,
        "lastTimestamp": last,
    }


def test_the_newest_warning_of_the_entry_of_this_pod_is_the_one_said() -> None:
    events = [
        _event(QUOTA, "2026-11-30T10:05:00Z", count=3),
        _event('PodResourceClaim gpus: resource claim template "t": not found', "2026-11-30T10:01:00Z"),
        _event(
            "PodResourceClaim other: create ResourceClaim : refused", "2026-11-30T10:09:00Z"
        ),  # another entry
        _event(QUOTA + "=9", "2026-11-30T10:08:00Z", uid="u1"),  # an earlier pod of the same name
    ]
    assert creation_warning(POD, events, "gpus") == PodWarning(QUOTA, 3, "2026-11-30T10:05:00Z")
    assert creation_warning(POD, events, "gpu") is None  # "gpus" is not the entry "gpu"
    assert creation_warning(POD, [_event(QUOTA, "2026-11-30T10:05:00Z", kind="Normal")], "gpus") is None


def test_the_words_say_where_a_quota_is_read_and_what_a_missing_template_waits_for() -> None:
    said = not_created_words("team", "big-gpus", PodWarning(QUOTA, 3, "2026-11-30T10:05:00Z"))
    assert said == (
        f"kube-controller-manager could not make it (3 times, last at 2026-11-30T10:05:00Z): {QUOTA}."
        " `kubectl describe resourcequota -n team` shows what the namespace may use and uses;"
        " kube-controller-manager makes the claim once it fits"
    )
    refused = PodWarning("PodResourceClaim gpus: create ResourceClaim : denied by a webhook", 1, "T")
    assert not_created_words("team", "big-gpus", refused) == (
        "kube-controller-manager could not make it (last at T): PodResourceClaim gpus: create ResourceClaim :"
        " denied by a webhook"
    )
    assert not_created_words("team", "big-gpus", None) == (
        "its ResourceClaimTemplate big-gpus does not exist in namespace team (`kubectl get resourceclaimtemplates"
        " -n team` lists them); kube-controller-manager makes the claim once it does"
    )


def _pod(name: str, uid: str, *, node: str = "", statuses: list[dict[str, str]] | None = None) -> Pod:
    return Pod.model_validate(
        {
            "metadata": {"name": name, "namespace": "team", "uid": uid},
            "spec": {
                "nodeName": node or None,
                "containers": [{"name": "c", "image": "i"}],
                "resourceClaims": [
                    {"name": "gpus", "resourceClaimTemplateName": "four"},
                    {"name": "shared", "resourceClaimName": "pool"},
                ],
            },
            "status": {"phase": "Pending", "resourceClaimStatuses": statuses or []},
        }
    )


def test_the_template_claims_no_claim_stands_for_yet_are_the_ones_not_made() -> None:
    owned = ObjectMeta.model_validate(
        {
            "name": "made-gpus-abcde",
            "namespace": "team",
            "annotations": {"resource.kubernetes.io/pod-claim-name": "gpus"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": "made", "uid": "u3", "controller": True}
            ],
        }
    )
    pods = [
        _pod("waits", "u1"),
        _pod("recorded", "u2", statuses=[{"name": "gpus", "resourceClaimName": "recorded-gpus-x"}]),
        _pod("made", "u3"),  # made, not recorded in the pod's status yet
        _pod("bound", "u4", node="n1"),  # kube-scheduler has placed it: not waiting
    ]
    assert unmade_claims(pods, [owned], {("team", "four")}) == [
        UnmadeClaim("team", "waits", "gpus", "four", True)
    ]
    (missing,) = unmade_claims(pods[:1], [], {("other", "four")})
    assert (missing.name, missing.template_exists) == ("waits-gpus", False)


def test_what_the_web_view_says_of_a_claim_not_made() -> None:
    missing = unmade_words(UnmadeClaim("team", "waits", "gpus", "four", False))
    assert missing == not_created_words("team", "four", None)
    assert "does not exist in namespace team" in missing
    waiting = unmade_words(UnmadeClaim("team", "waits", "gpus", "four", True))
    assert "FailedResourceClaimCreation Warning on pod waits" in waiting
    assert "`gpudra explain pod waits -n team`" in waiting
