"""When the kubelet's Warning that it could not prepare a pod's claims still says why the pod waits, which of the
pod's Events it is, and the words `gpudra explain pod` prints for it."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.api.core import Pod
from gpudra.api.dra import ResourceClaim
from gpudra.planning.preparestatus import (
    KubeletWarning,
    kubelet_warning,
    kubelet_warning_words,
    waits_for_prepare,
)

NOT_REGISTERED = (  # a 1.37 kubelet's words (pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go, wrapped)
    "Failed to prepare dynamic resources: prepare dynamic resources: DRA driver gpu.nvidia.com is not registered"
)


def _claim(ready: str | None, allocated: bool = True) -> ResourceClaim:
    """A claim of gpu-0 on n1: allocated or not, with a Ready condition of ``ready`` ("True", "False") or none."""
    result = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}
    status: dict[str, Any] = {"allocation": {"devices": {"results": [result]}}} if allocated else {}
    if ready is not None:
        condition = {
            "type": "Ready",
            "status": ready,
            "reason": "Prepared" if ready == "True" else "DeviceInUse",
        }
        status["devices"] = [
            {**{k: result[k] for k in ("driver", "pool", "device")}, "conditions": [condition]}
        ]
    return ResourceClaim.model_validate({"metadata": {"name": "c", "namespace": "default"}, "status": status})


def _pod(node: str | None = "n1", phase: str | None = "Pending") -> Pod:
    return Pod.model_validate(
        {
            "metadata": {"name": "p", "namespace": "default", "uid": "pod-uid"},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "cuda"}]},
            "status": {"phase": phase},
        }
    )


@pytest.mark.parametrize(
    ("pod", "claims", "waits"),
    [
        (_pod(), [_claim(None)], True),  # no driver wrote anything: the kubelet's words are all there is
        (_pod(), [_claim("True"), _claim(None)], True),  # one of two prepared
        (_pod(), [_claim("True")], False),  # prepared: the pod waits for something else
        (_pod(), [_claim("False")], False),  # the driver says why, in its own words
        (_pod(), [_claim(None, allocated=False)], False),  # not allocated: the claim's own explanation
        (_pod(node=None), [_claim(None)], False),  # not bound: no kubelet has it
        (_pod(phase="Running"), [_claim(None)], False),  # started: an old Warning no longer stands
    ],
)
def test_the_kubelets_warning_stands_while_the_bound_pod_waits_and_no_driver_said_why(
    pod: Pod, claims: list[ResourceClaim], waits: bool
) -> None:
    assert waits_for_prepare(pod, claims) is waits


def _event(
    message: str, last: str, *, uid: str = "pod-uid", reason: str = "FailedPrepareDynamicResources"
) -> dict[str, Any]:
    return {
        "type": "Warning",
        "reason": reason,
        "message": message,
        "count": 3,
        "lastTimestamp": last,
        "involvedObject": {"kind": "Pod", "name": "p", "uid": uid},
    }


def test_the_newest_prepare_warning_of_this_pod_is_the_one_said() -> None:
    events = [
        _event("older", "2026-11-30T10:00:00Z"),
        _event(NOT_REGISTERED, "2026-11-30T10:05:00Z"),
        _event("a pod of the same name before", "2026-11-30T10:09:00Z", uid="earlier-pod"),
        _event("not about prepares", "2026-11-30T10:09:00Z", reason="FailedMount"),
    ]
    assert kubelet_warning(_pod(), events) == KubeletWarning("n1", NOT_REGISTERED, 3, "2026-11-30T10:05:00Z")
    assert kubelet_warning(_pod(), events[2:]) is None


def test_an_unregistered_driver_is_named_with_where_to_look_and_when_the_kubelet_tries_again() -> None:
    words = kubelet_warning_words(KubeletWarning("n1", NOT_REGISTERED, 3, "2026-11-30T10:05:00Z"))
    assert words == [
        f"the kubelet on node n1 says (3 times, last at 2026-11-30T10:05:00Z): {NOT_REGISTERED}",
        "no kubelet plugin of gpu.nvidia.com is registered on node n1: is gpudra's agent running there?"
        " (`kubectl get pods -A -o wide --field-selector spec.nodeName=n1`)",
        "the kubelet tries the prepare again at its next sync of the pod, a minute or more after it failed",
    ]
    once = kubelet_warning_words(
        KubeletWarning("n1", "NodePrepareResources: rpc error: code = Unavailable", 1, "t")
    )
    assert (
        once[0]
        == "the kubelet on node n1 says (last at t): NodePrepareResources: rpc error: code = Unavailable"
    )
    assert len(once) == 2  # no guess about the agent for another failure
