"""Which claim reservations let the stand-in kubelet start a pod: the pod's own, or its PodGroup's (1.37)."""

from __future__ import annotations

from typing import Any

from gpudra.cluster.kubelet.standin import reserved_for_pod


def pod(group: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingGroup": {"podGroupName": group}} if group else {}
    return {"metadata": {"name": "w-0", "uid": "pod-uid"}, "spec": spec}


GROUP_ENTRY = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train", "uid": "group-uid"}


def test_a_pod_may_use_a_claim_reserved_for_it_or_for_its_podgroup() -> None:
    assert reserved_for_pod(pod(), [{"resource": "pods", "name": "w-0", "uid": "pod-uid"}])
    assert reserved_for_pod(pod("train"), [GROUP_ENTRY])


def test_a_pod_may_not_use_a_claim_reserved_for_another_podgroup_or_when_it_is_in_none() -> None:
    assert not reserved_for_pod(pod("other"), [GROUP_ENTRY])
    assert not reserved_for_pod(pod(), [GROUP_ENTRY])
    assert not reserved_for_pod(pod("train"), [{**GROUP_ENTRY, "resource": "workloads"}])
    assert not reserved_for_pod(pod("train"), [])
