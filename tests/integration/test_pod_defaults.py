"""Pods on the embedded cluster are defaulted and admitted as kube-apiserver 1.37.2 does it (restartPolicy,
dnsPolicy, schedulerName, serviceAccountName and its token volume, terminationGracePeriodSeconds,
enableServiceLinks, priority, the not-ready/unreachable tolerations, qosClass), and binding leaves the
generation at 1. The expected pods are what the real API server stored (tests/fixtures/pods, checked against a
live one in tests/kubernetes/test_real_pod_defaults.py)."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from clusterkit import StartCluster, eventually
from gpudra.errors import KubeError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import PODS
from podkit import normalised, recorded, sample_pods

pytestmark = pytest.mark.timeout(120)


async def bound(client: KubeClient, name: str) -> dict[str, Any] | None:
    pod = await client.get_raw(PODS, name, "default")
    return pod if (pod.get("spec") or {}).get("nodeName") else None


async def test_pods_are_stored_as_kube_apiserver_stores_them(start_cluster: StartCluster) -> None:
    cluster = await start_cluster("l4x4:1")
    client = cluster.client
    assert client is not None
    expected = recorded()
    for pod in sample_pods():
        await client.create(PODS, pod, "default")
    for pod in sample_pods():
        name = pod["metadata"]["name"]
        stored = await eventually(functools.partial(bound, client, name))
        assert stored["metadata"]["generation"] == 1  # binding sets spec.nodeName without a new generation
        got = normalised(stored)
        for part in ("metadata", "spec", "status"):
            assert got[part] == expected[name][part], (name, part)


async def test_admission_refuses_what_kube_apiserver_refuses(start_cluster: StartCluster) -> None:
    """A ServiceAccount or PriorityClass that does not exist, and a priority the pod sets itself: 403 Forbidden
    with kube-apiserver 1.37.2's words."""
    cluster = await start_cluster("l4x4:1")
    client = cluster.client
    assert client is not None
    base = sample_pods()[2]
    cases: dict[str, tuple[dict[str, Any], str]] = {
        "no-account": (
            {"serviceAccountName": "nope"},
            'error looking up service account default/nope: serviceaccount "nope" not found',
        ),
        "no-class": ({"priorityClassName": "nope"}, "no PriorityClass with name nope was found"),
        "own-priority": (
            {"priority": 5},
            "the integer value of priority (5) must not be provided in pod spec; priority admission controller "
            "computed 0 from the given PriorityClass name",
        ),
    }
    for name, (extra, why) in cases.items():
        pod = {**base, "metadata": {"name": name, "namespace": "default"}, "spec": {**base["spec"], **extra}}
        with pytest.raises(KubeError) as caught:
            await client.create(PODS, pod, "default")
        assert caught.value.status == 403
        assert f'pods "{name}" is forbidden: {why}' in str(caught.value)
