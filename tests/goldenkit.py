"""The golden corpus (tests/golden/pending_claims.yaml) on a running cluster, the same on both control planes
(tests/integration/test_golden_pods.py, tests/kubernetes/test_real_golden_pods.py): for each scenario, its fleet's
ResourceSlices and Nodes, its busy claims (allocated in their status, as kube-scheduler writes it) and its pending
claim are created through the API, then a pod that uses that claim; the pod must get gpudra's Warning Event with the
scenario's reason code and the very text the controller's explanation gives for that cluster (the unit tier's
computation, tests/unit/test_explain_golden.py), leading with the scenario's `first` sentence, and `kubectl describe
pod` must show it. One cluster serves every scenario: what a scenario created is deleted before the next starts.

The cluster runs no simulated node of its own (an empty fleet): the slices are the ones a scenario's agents would
publish (tests/goldenfleet.py), written directly, so that faults no agent publishes on request (a pool announcing a
slice more than it has) and fleets of every shape fit in one cluster. Two scenario fields need more than the API:
`planner` is the controller's setting (run such scenarios on a cluster whose controller has it), and a claim with
``adminAccess`` in a namespace without the admin-access label is refused at create by both API servers, so the
namespace is labelled while the claim is created and unlabelled before the pod is."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from clusterkit import eventually, kubectl
from goldenfleet import busy_claims, expected_event, fleet_slices, pending_claim
from gpudra.cluster.up import EmbeddedCluster
from gpudra.errors import KubeError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import NAMESPACES, NODES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from podexplainkit import controller_events

ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
EVENT_TIMEOUT = 60.0
"""Seconds a scenario's pod may take to get the expected Event (the controller's view is cached for 2 s, so a
first Event can still describe the previous scenario's cluster; a new one follows when the explanation changes)."""


@dataclass(frozen=True)
class Seen:
    """What one scenario gave on the cluster."""

    name: str
    problem: str
    """Empty when the pod got the expected Event and `kubectl describe pod` showed it; else what went wrong."""
    refused: str
    """The API server's refusal of the scenario's pending claim (then there is no pod), else empty."""
    events: int
    """How many Events gpudra's controller posted on the pod."""
    seconds: float


def _client(cluster: EmbeddedCluster) -> KubeClient:
    assert cluster.client is not None
    return cluster.client


def _fresh(body: dict[str, Any]) -> dict[str, Any]:
    """An object as a user creates it: without the uid, creation time and status the corpus gives it."""
    meta = {k: v for k, v in body["metadata"].items() if k not in ("uid", "creationTimestamp")}
    return {**{k: v for k, v in body.items() if k != "status"}, "metadata": meta}


def _pod(name: str, namespace: str, claim: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [{"name": "main", "image": "cuda", "resources": {"claims": [{"name": "gpus"}]}}],
            "resourceClaims": [{"name": "gpus", "resourceClaimName": claim}],
        },
    }


async def _ensure_namespace(client: KubeClient, name: str) -> None:
    if name != "default":
        await client.apply_object(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )


async def _set_up(client: KubeClient, scenario: dict[str, Any]) -> dict[str, Any]:
    """The scenario's fleet and busy claims; returns its pending claim (not created yet)."""
    slices = fleet_slices(scenario)
    for node in sorted({s["spec"]["nodeName"] for s in slices}):
        await client.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    for body in slices:
        await client.create(RESOURCE_SLICES, body)
    for busy in busy_claims(scenario):
        made = await client.create(RESOURCE_CLAIMS, _fresh(busy), "default")
        made["status"] = busy["status"]
        await client.replace(RESOURCE_CLAIMS, made, subresource="status")
    return _fresh(pending_claim(scenario, slices))


async def _create_pending(client: KubeClient, claim: dict[str, Any], namespace: str) -> None:
    admin = any((r.get("exactly") or {}).get("adminAccess") for r in claim["spec"]["devices"]["requests"])
    if not admin:
        await client.create(RESOURCE_CLAIMS, claim, namespace)
        return
    await client.patch(NAMESPACES, namespace, {"metadata": {"labels": {ADMIN_ACCESS_LABEL: "true"}}})
    try:
        await client.create(RESOURCE_CLAIMS, claim, namespace)
    finally:
        await client.patch(NAMESPACES, namespace, {"metadata": {"labels": {ADMIN_ACCESS_LABEL: None}}})


async def _tear_down(client: KubeClient, scenario: dict[str, Any]) -> None:
    """Delete what the scenario created and wait until it is gone."""
    namespace = scenario.get("namespace", "default")
    await client.delete(PODS, scenario["name"], namespace, grace_period_seconds=0)
    for ns in {"default", namespace}:
        for claim in (await client.list_raw(RESOURCE_CLAIMS, ns))[0]:
            await client.delete(RESOURCE_CLAIMS, claim["metadata"]["name"], ns)
    for body in (await client.list_raw(RESOURCE_SLICES))[0]:
        await client.delete(RESOURCE_SLICES, body["metadata"]["name"])
    for node in (await client.list_raw(NODES))[0]:
        await client.delete(NODES, node["metadata"]["name"])

    async def gone() -> bool:
        left = [
            *(await client.list_raw(RESOURCE_CLAIMS, None))[0],
            *(await client.list_raw(RESOURCE_SLICES))[0],
            *(await client.list_raw(NODES))[0],
        ]
        pods = [
            p
            for p in (await client.list_raw(PODS, namespace))[0]
            if p["metadata"]["name"] == scenario["name"]
        ]
        return not left and not pods

    await eventually(gone, timeout=60, what=f"scenario {scenario['name']} cleaned up")


def _flat(text: str) -> str:
    return " ".join(text.split())


async def _pod_explained(cluster: EmbeddedCluster, scenario: dict[str, Any]) -> tuple[str, int]:
    """Wait for the pod's Event; (what differs from the expectation, empty if nothing; how many Events)."""
    name, namespace = scenario["name"], scenario.get("namespace", "default")
    reason, text = expected_event(scenario)
    if not text.startswith(scenario["first"]) or reason != scenario["reason"]:
        return f"the corpus and the computation disagree: {reason}: {text}", 0
    posted: list[dict[str, Any]] = []

    async def said() -> bool:
        posted[:] = await controller_events(cluster, "Pod", name, namespace)
        return any(e["reason"] == reason and e["message"] == text and e["type"] == "Warning" for e in posted)

    try:
        await eventually(said, timeout=EVENT_TIMEOUT, interval=0.2, what=f"pod {namespace}/{name}'s Event")
    except AssertionError:
        last = [(e["reason"], e["message"]) for e in posted]
        return f"expected {reason}: {text!r}; the pod's gpudra Events: {last}", len(posted)
    described = _flat(await kubectl(cluster, "describe", "pod", name, "-n", namespace))
    if _flat(text) not in described:
        return f"`kubectl describe pod` does not show {text!r}: {described}", len(posted)
    return "", len(posted)


async def run_scenario(cluster: EmbeddedCluster, scenario: dict[str, Any]) -> Seen:
    """Set the scenario up, create its pod, wait for the pod's Event, compare it, and clean up."""
    client = _client(cluster)
    started = time.monotonic()
    namespace = scenario.get("namespace", "default")
    await _ensure_namespace(client, namespace)
    try:
        claim = await _set_up(client, scenario)
        try:
            await _create_pending(client, claim, namespace)
        except KubeError as exc:
            if exc.status != 422:
                raise
            return Seen(scenario["name"], "", str(exc), 0, time.monotonic() - started)
        await client.create(PODS, _pod(scenario["name"], namespace, claim["metadata"]["name"]), namespace)
        problem, events = await _pod_explained(cluster, scenario)
        return Seen(scenario["name"], problem, "", events, time.monotonic() - started)
    finally:
        await _tear_down(client, scenario)


async def run_corpus(cluster: EmbeddedCluster, scenarios: list[dict[str, Any]]) -> list[Seen]:
    """Every scenario, one after the other, on the same cluster."""
    return [await run_scenario(cluster, scenario) for scenario in scenarios]


NOT_ON_A_CLUSTER = {
    "cel-compile-error": "spec.devices.requests[0].exactly.selectors[0].cel.expression: Invalid value",
    "unknown-class": "spec.devices.requests[0].exactly.deviceClassName: Invalid value",
}
"""Scenarios whose pending claim no API server takes, with the words of its refusal: kube-apiserver 1.37.2 (and the
embedded one as it does) refuses a selector that does not compile and a class name that is not a DNS subdomain
(``nvidia.com/gpu``), so no pod can wait on such a claim there."""


async def check_corpus(cluster: EmbeddedCluster, scenarios: list[dict[str, Any]]) -> None:
    """Run the scenarios on the cluster; every pod is explained as the corpus says, and only the scenarios of
    ``NOT_ON_A_CLUSTER`` are refused, as it says. Prints how long each took."""
    started = time.monotonic()
    seen = await run_corpus(cluster, scenarios)
    took = time.monotonic() - started
    each = ", ".join(f"{s.name} {s.seconds:.1f} s ({s.events} Events)" for s in seen)
    print(f"{len(seen)} scenarios in {took:.1f} s: {each}")
    problems = [f"{s.name}: {s.problem}" for s in seen if s.problem]
    for s in seen:
        refusal = NOT_ON_A_CLUSTER.get(s.name)
        if refusal is None and s.refused:
            problems.append(f"{s.name}: the pending claim was refused: {s.refused}")
        elif refusal is not None and refusal not in s.refused:
            problems.append(f"{s.name}: expected a refusal saying {refusal!r}, got {s.refused or 'none'}")
    assert not problems, "\n".join(problems)
