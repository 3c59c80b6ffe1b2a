"""`gpudra explain claim` on a claim whose pod is bound to a node: "will not be allocated" only when the claim is
still unallocated once the pod is read (kube-scheduler allocates a pod's claims, then binds it)."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.api.dra import ResourceClaim
from gpudra.cli.explain import _stranded
from gpudra.cli.explainoutput import STRANDED
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import Resource

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "trainer", "namespace": "default", "uid": "p1"},
    "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "cuda"}]},
}


def _claim(*, allocated: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": "trainer-gpu-x",
            "namespace": "default",
            "uid": "c1",
            "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": "trainer", "uid": "p1", "controller": True}
            ],
        },
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
        },
    }
    if allocated:
        results = [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}]
        body["status"] = {"allocation": {"devices": {"results": results}}}
    return body


def _server(monkeypatch: pytest.MonkeyPatch, claim_now: dict[str, Any]) -> KubeClient:
    """A client of a server that has pod trainer bound to n1, and its claim as ``claim_now``."""
    client = KubeClient.__new__(KubeClient)

    async def get_raw(res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        assert res.plural == "pods" and name == "trainer"
        return POD

    async def list_raw(
        res: Resource, namespace: str | None = None, **_: Any
    ) -> tuple[list[dict[str, Any]], str]:
        assert res.plural == "resourceclaims"
        return [claim_now], "1"

    monkeypatch.setattr(client, "get_raw", get_raw, raising=False)
    monkeypatch.setattr(client, "list_raw", list_raw, raising=False)
    return client


async def test_a_claim_allocated_since_it_was_read_is_not_said_stranded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read_before = ResourceClaim.model_validate(_claim(allocated=False))
    client = _server(monkeypatch, _claim(allocated=True))
    assert await _stranded(client, read_before) is None


async def test_a_claim_still_unallocated_with_its_pod_bound_is_stranded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read_before = ResourceClaim.model_validate(_claim(allocated=False))
    client = _server(monkeypatch, _claim(allocated=False))
    answer = await _stranded(client, read_before)
    assert answer is not None and answer.state == STRANDED and answer.reason == "PodAlreadyBound"
    assert answer.words.startswith("pod default/trainer is bound to node n1 and this claim is not allocated")
