"""The controller's record of unallocated claims, kept from each claim change (what the explanations look at)."""

from __future__ import annotations

from typing import Any

from gpudra.api.dra import ResourceClaim
from gpudra.controller.pending import PendingClaims
from gpudra.kube.client import KubeClient
from gpudra.metrics import Metrics


def _claim(uid: str, *, allocated: bool) -> ResourceClaim:
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": uid,
            "namespace": "default",
            "uid": uid,
            "creationTimestamp": "2026-11-27T00:00:00Z",
        },
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
        },
    }
    if allocated:
        results = [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n", "device": "gpu-0"}]
        body["status"] = {"allocation": {"devices": {"results": results}}}
    return ResourceClaim.model_validate(body)


def _pending(metrics: Metrics) -> PendingClaims:
    return PendingClaims(KubeClient.__new__(KubeClient), metrics, driver="gpu.nvidia.com")


def _waits(metrics: Metrics) -> float:
    return metrics.registry.get_sample_value("gpudra_claim_pending_seconds_count") or 0.0


def test_unallocated_claims_are_kept_until_allocated_or_deleted() -> None:
    metrics = Metrics()
    pending = _pending(metrics)
    pending.claim_changed("a", _claim("a", allocated=False))
    pending.claim_changed("b", _claim("b", allocated=False))
    pending.claim_changed("c", _claim("c", allocated=True))
    assert sorted(pending.unallocated) == ["a", "b"]

    pending.reasons["a"] = "NoMatchingDevice"  # explained while pending
    pending.claim_changed("a", _claim("a", allocated=True))
    pending.claim_changed("b", None)
    assert pending.unallocated == {}
    assert pending.reasons == {}
    assert _waits(metrics) == 1.0  # only the claim seen pending counts its wait


def test_a_claim_that_stops_parsing_is_dropped_and_its_reason_forgotten() -> None:
    metrics = Metrics()
    pending = _pending(metrics)
    pending.claim_changed("a", _claim("a", allocated=False))
    pending.reasons["a"] = "NoMatchingDevice"
    pending.claim_changed("a", None)
    assert pending.unallocated == {} and pending.reasons == {}
    assert _waits(metrics) == 0.0
