"""Reads the real-control-plane tier shares: pods, claims and the devices they hold, through the admin client."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gpudra.cluster.kubernetes.binaries import kubernetes_version, version_minor
from gpudra.cluster.up import EmbeddedCluster
from gpudra.config import ControllerSettings
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import EVENTS, PODS, RESOURCE_CLAIMS

StartKubernetes = Callable[..., Awaitable[EmbeddedCluster]]
FAST_CONTROLLER = ControllerSettings(pending_grace_seconds=0.2, pending_interval_seconds=0.5)
MINOR = version_minor(kubernetes_version())
"""The minor of the Kubernetes version this run of the tier starts (``K8S_VERSION``, else 1.37.2; ``make
test-matrix`` sets it per version), known before any cluster starts: a test of a feature that version lacks is
skipped with the reason, never failed."""


def needs_minor(minor: int, why: str) -> pytest.MarkDecorator:
    """Skip the test on a version older than 1.<minor>, saying why."""
    return pytest.mark.skipif(minor > MINOR, reason=f"Kubernetes 1.{MINOR}: {why} (from 1.{minor})")


def admin(cluster: EmbeddedCluster) -> KubeClient:
    assert cluster.client is not None
    return cluster.client


async def pods(cluster: EmbeddedCluster, namespace: str | None = "default") -> dict[str, dict[str, Any]]:
    items, _ = await admin(cluster).list_raw(PODS, namespace)
    return {p["metadata"]["name"]: p for p in items}


def phase(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase", ""))


async def claims(cluster: EmbeddedCluster, namespace: str | None = "default") -> dict[str, dict[str, Any]]:
    items, _ = await admin(cluster).list_raw(RESOURCE_CLAIMS, namespace)
    return {c["metadata"]["name"]: c for c in items}


def results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("results") or [])


def held_devices(all_claims: dict[str, dict[str, Any]]) -> Counter[tuple[str, str, str]]:
    """(driver, pool, device) -> how many claims hold it (share ids told apart)."""
    held: Counter[tuple[str, str, str]] = Counter()
    for claim in all_claims.values():
        for result in results(claim):
            device = result["device"] + (f"/{result['shareID']}" if result.get("shareID") else "")
            held[(result["driver"], result["pool"], device)] += 1
    return held


async def events_of(cluster: EmbeddedCluster, name: str, namespace: str = "default") -> list[dict[str, Any]]:
    items, _ = await admin(cluster).list_raw(EVENTS, namespace, field_selector=f"involvedObject.name={name}")
    return items
