"""The controller's record of unallocated claims, kept from each claim change (what the explanations look at), and
of the pods waiting on claims."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpudra.allocator import spec_json
from gpudra.api.core import Pod
from gpudra.api.dra import ResourceClaim
from gpudra.api.meta import ObjectMeta, OwnerReference
from gpudra.controller import pending as pending_module
from gpudra.controller import pendingpods as pendingpods_module
from gpudra.controller.pending import PendingClaims, Said, uses_driver
from gpudra.controller.pendingpods import PendingPods
from gpudra.devices.classes import load_device_classes
from gpudra.errors import KubeError
from gpudra.kube.client import KubeClient
from gpudra.kube.informer import Informers
from gpudra.kube.resources import Resource
from gpudra.metrics import Metrics
from gpudra.planning.podclaims import implicit_uid


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


def test_a_pods_implicit_claim_is_forgotten_once_the_pod_is_bound() -> None:
    metrics = Metrics()
    pending = _pending(metrics)
    client = KubeClient.__new__(KubeClient)
    pods = PendingPods(client, Informers(client), pending)
    body: dict[str, Any] = {
        "metadata": {"name": "legacy", "namespace": "default", "uid": "p1"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 9}}}]},
    }
    pods.pod_changed("p1", Pod.model_validate(body))
    assert list(pods.waiting) == ["p1"]
    pending.reasons[implicit_uid("p1")] = "InsufficientDevices"  # explained while it waited
    pending.said[implicit_uid("p1")] = Said("InsufficientDevices", "needs 9 GPUs on one node")
    pods.pod_changed("p1", None)  # bound (it left the watch of unbound pods)
    assert pods.waiting == {} and pending.said == {} and pending.reasons == {}


def test_a_claim_naming_a_misspelt_class_of_the_driver_is_the_drivers_to_explain() -> None:
    classes = {c.metadata.name or "": c for c in load_device_classes()}

    def naming(device_class: str) -> ResourceClaim:
        claim = _claim("a", allocated=False)
        assert claim.spec.devices.requests and claim.spec.devices.requests[0].exactly
        claim.spec.devices.requests[0].exactly.device_class_name = device_class
        return claim

    assert uses_driver(naming("gpu.nvidia.con"), classes, "gpu.nvidia.com")  # "did you mean gpu.nvidia.com?"
    assert uses_driver(naming("gpu.nvidia.com"), classes, "gpu.nvidia.com")
    assert not uses_driver(naming("fpga.example.com"), classes, "gpu.nvidia.com")  # no class of ours is near


def test_a_claims_spec_json_is_kept_for_that_parsed_spec_only() -> None:
    first = _claim("a", allocated=False)
    first.metadata.resource_version = "7"
    text = spec_json(first)
    assert '"device_class_name":"gpu.nvidia.com"' in text.replace(" ", "")
    assert spec_json(first) is text  # asked again at the next round: not serialized again
    again = _claim("a", allocated=False)  # the same uid and resourceVersion, parsed anew with another class
    again.metadata.resource_version = "7"
    assert again.spec.devices.requests and again.spec.devices.requests[0].exactly
    again.spec.devices.requests[0].exactly.device_class_name = "mig.nvidia.com"
    assert '"device_class_name":"mig.nvidia.com"' in spec_json(again).replace(" ", "")


async def test_a_round_walks_the_class_names_of_one_claim_spec_once(monkeypatch: pytest.MonkeyPatch) -> None:
    classes = {c.metadata.name or "": c for c in load_device_classes()}
    walked: list[str] = []
    real = pending_module._class_names

    def counting(claim: ResourceClaim) -> frozenset[str]:
        walked.append(claim.metadata.uid or "")
        return real(claim)

    monkeypatch.setattr(pending_module, "_class_names", counting)
    others: list[ResourceClaim] = []
    for i in range(30):  # one template's claims, of another driver's class
        claim = _claim(f"c{i}", allocated=False)
        assert claim.spec.devices.requests and claim.spec.devices.requests[0].exactly
        claim.spec.devices.requests[0].exactly.device_class_name = "fpga.example.com"
        others.append(claim)
    pending = _pending(Metrics())
    assert await pending.check_all(others, classes) == {}  # none of them is the driver's to explain
    assert walked == ["c0"]


async def test_a_round_without_waiting_pods_does_not_index_the_pending_claims_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    named: list[str] = []
    real = ObjectMeta.namespaced_name

    def counting(meta: ObjectMeta) -> str:
        named.append(meta.name or "")
        return str(real.fget(meta))  # type: ignore[attr-defined]

    pending = _pending(Metrics())
    client = KubeClient.__new__(KubeClient)
    pods = PendingPods(client, Informers(client), pending)
    for i in range(30):
        pending.claim_changed(f"c{i}", _claim(f"c{i}", allocated=False))
    monkeypatch.setattr(ObjectMeta, "namespaced_name", property(counting))
    assert await pods.check_all([], {}, grace_seconds=10) == set()
    assert named == []


def test_a_pods_claims_are_forgotten_at_their_deletion_without_new_metadata(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = KubeClient.__new__(KubeClient)
    pods = PendingPods(client, Informers(client), _pending(Metrics()))
    claim = _claim("a", allocated=False)
    claim.metadata.owner_references = [
        OwnerReference(api_version="v1", kind="Pod", name="trainer", uid="p1", controller=True)
    ]
    pods.claim_changed("a", claim)
    assert list(pods._owned) == ["p1"]
    made: list[object] = []

    def counting(**fields: Any) -> ObjectMeta:
        made.append(fields)
        return ObjectMeta(**fields)

    monkeypatch.setattr(pendingpods_module, "ObjectMeta", counting)
    for _ in range(3):  # deleted, and a deletion handed again (a re-list's)
        pods.claim_changed("a", None)
    assert pods._owned == {} and made == []


def _owned_claim(uid: str, *, allocated: bool, entry: str = "gpu") -> ResourceClaim:
    """A claim kube-controller-manager made for pod trainer's ``entry``."""
    claim = _claim(uid, allocated=allocated)
    claim.metadata.annotations = {"resource.kubernetes.io/pod-claim-name": entry}
    claim.metadata.resource_version = "7" if allocated else "6"
    claim.metadata.owner_references = [
        OwnerReference(api_version="v1", kind="Pod", name="trainer", uid="p1", controller=True)
    ]
    return claim


def _server(
    monkeypatch: pytest.MonkeyPatch, claims: list[ResourceClaim], *, claims_read_together: int = 1
) -> tuple[KubeClient, list[str | None], list[tuple[str, str, str]]]:
    """A client of an API server that has pod trainer bound to node n1 and ``claims``; the field selectors of its
    lists, and the Events posted (kind, name, message). A read of a claim answers only once
    ``claims_read_together`` such reads are in flight (an error after 2 s)."""
    client = KubeClient.__new__(KubeClient)
    lists: list[str | None] = []
    posted: list[tuple[str, str, str]] = []
    pod = {"metadata": {"name": "trainer", "namespace": "default", "uid": "p1"}, "spec": {"nodeName": "n1"}}
    objects = {"pods": [pod], "resourceclaims": [c.to_wire() for c in claims]}
    together = asyncio.Barrier(claims_read_together)

    async def list_raw(
        res: Resource, namespace: str | None = None, **kw: str
    ) -> tuple[list[dict[str, Any]], str]:
        selector = kw.get("field_selector") or ""
        lists.append(selector)
        if res.plural == "resourceclaims":
            try:
                await asyncio.wait_for(together.wait(), 2)
            except TimeoutError:
                raise KubeError(f"read alone: {lists}") from None
        name = selector.removeprefix("metadata.name=")
        return [o for o in objects[res.plural] if o["metadata"]["name"] == name], "1"

    async def create(res: object, body: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        involved = body["involvedObject"]
        posted.append((involved["kind"], involved["name"], body["message"]))
        return body

    monkeypatch.setattr(client, "list_raw", list_raw, raising=False)
    monkeypatch.setattr(client, "create", create, raising=False)
    return client, lists, posted


async def test_a_claim_made_twice_for_a_bound_pod_names_the_one_it_runs_with(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kube-controller-manager made trainer's claim twice and the scheduler allocated the first: the second is said
    to wait on nothing, naming the first, on the claim and on the pod (and to the web view, woken once); the pod
    and the claim are read once."""
    first, second = _owned_claim("first", allocated=True), _owned_claim("second", allocated=False)
    client, lists, posted = _server(monkeypatch, [first, second])
    pending = PendingClaims(client, Metrics(), driver="gpu.nvidia.com")
    pods = PendingPods(client, Informers(client), pending)
    for claim in (first, second):
        pods.claim_changed(claim.metadata.uid or "", claim)
        pending.claim_changed(claim.metadata.uid or "", claim)
    classes = {c.metadata.name or "": c for c in load_device_classes()}
    woken: list[str] = []
    pending.told_listeners.append(lambda: woken.append("web view"))

    assert await pods.check_all([second], classes, grace_seconds=0) == {"second"}
    said = pending.said["second"]
    assert (pending.stranded("second"), pending.stranded("first"), woken) == (said, None, ["web view"])
    assert said.reason == "PodAlreadyBound"
    assert said.text.startswith("pod default/trainer is bound to node n1 with claim first, which"), said.text
    assert "kubernetes/kubernetes#140217" in said.text
    assert [(kind, name) for kind, name, _ in posted] == [("ResourceClaim", "second"), ("Pod", "trainer")]
    assert {message for _, _, message in posted} == {said.text}
    assert lists == ["metadata.name=trainer", "metadata.name=second"]
    await pods.check_all([second], classes, grace_seconds=0)
    assert lists == ["metadata.name=trainer", "metadata.name=second"]  # remembered while they do not change
    assert woken == ["web view"]  # told again the same: nothing new to draw
    for claim in (first, second):
        pods.claim_changed(claim.metadata.uid or "", None)
    assert pods._bound == {}


async def test_a_claim_whose_pod_got_bound_is_not_said_stranded_while_the_server_has_it_allocated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kube-scheduler allocated the claim, then bound the pod, and the pods' watch brought the binding first: the
    claim is not said to wait on nothing (nor explained by the allocator) while the claims' watch catches up."""
    cached = _owned_claim("late", allocated=False)
    client, lists, posted = _server(monkeypatch, [_owned_claim("late", allocated=True)])
    pending = PendingClaims(client, Metrics(), driver="gpu.nvidia.com")
    pods = PendingPods(client, Informers(client), pending)
    pods.claim_changed("late", cached)
    pending.claim_changed("late", cached)
    classes = {c.metadata.name or "": c for c in load_device_classes()}

    await pods.check_all([cached], classes, grace_seconds=0)
    assert (pending.said, pending.reasons, posted) == ({}, {}, [])
    assert lists == ["metadata.name=trainer", "metadata.name=late"]


async def test_the_claims_of_a_pod_created_bound_are_read_together_and_the_pod_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pod trainer was created bound with two claims: its claims are read from the API server in the same round
    trip's time, not one after the other, and the pod is looked up once for both; both are said stranded."""
    claims = [_owned_claim(e, allocated=False, entry=e) for e in ("gpu", "nic")]
    client, lists, posted = _server(monkeypatch, claims, claims_read_together=2)
    pending = PendingClaims(client, Metrics(), driver="gpu.nvidia.com")
    pods = PendingPods(client, Informers(client), pending)
    for claim in claims:
        pods.claim_changed(claim.metadata.uid or "", claim)
        pending.claim_changed(claim.metadata.uid or "", claim)
    classes = {c.metadata.name or "": c for c in load_device_classes()}

    await asyncio.wait_for(pods.check_all(claims, classes, grace_seconds=0), 10)
    assert sorted(lists, key=str) == ["metadata.name=gpu", "metadata.name=nic", "metadata.name=trainer"]
    assert lists[0] == "metadata.name=trainer"
    assert (pending.reasons.get("gpu"), pending.reasons.get("nic")) == ("PodAlreadyBound", "PodAlreadyBound")
    assert sorted(name for kind, name, _ in posted if kind == "ResourceClaim") == ["gpu", "nic"]
    await asyncio.wait_for(pods.check_all(claims, classes, grace_seconds=0), 10)
    assert len(lists) == 3  # remembered until they change
    for claim in claims:
        pods.claim_changed(claim.metadata.uid or "", claim)
    await asyncio.wait_for(pods.check_all(claims, classes, grace_seconds=0), 10)
    assert sorted(lists[3:], key=str) == ["metadata.name=gpu", "metadata.name=nic"]  # changed: read again


async def test_a_claim_deleted_while_its_pod_is_looked_up_does_not_end_the_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The claims' watch brings a claim's deletion while the round waits for the pod's lookup: the round goes on
    and its other claim is said stranded."""
    claims = [_owned_claim(e, allocated=False, entry=e) for e in ("gpu", "nic")]
    client, _, _ = _server(monkeypatch, claims)
    pending = PendingClaims(client, Metrics(), driver="gpu.nvidia.com")
    pods = PendingPods(client, Informers(client), pending)
    for claim in claims:
        pods.claim_changed(claim.metadata.uid or "", claim)
        pending.claim_changed(claim.metadata.uid or "", claim)
    served = client.list_raw

    async def deleted_meanwhile(res: Resource, namespace: str | None = None, **kw: str) -> Any:
        if res.plural == "pods":
            pods.claim_changed("nic", None)
            pending.claim_changed("nic", None)
        return await served(res, namespace, **kw)

    monkeypatch.setattr(client, "list_raw", deleted_meanwhile, raising=False)
    classes = {c.metadata.name or "": c for c in load_device_classes()}

    await asyncio.wait_for(pods.check_all(claims, classes, grace_seconds=0), 10)
    assert pending.reasons.get("gpu") == "PodAlreadyBound"


async def test_the_claim_of_a_gated_pod_is_explained_without_looking_the_pod_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pod held by a scheduling gate (Kueue's, say) is in the watch of unbound pods, not among the waiting: its
    claim is explained by the allocator, and no list of pods is made for it."""
    client = KubeClient.__new__(KubeClient)
    lists: list[str] = []

    async def list_raw(
        res: object, namespace: str | None = None, **kw: str
    ) -> tuple[list[dict[str, Any]], str]:
        lists.append(kw.get("field_selector") or "")
        return [], "1"

    monkeypatch.setattr(client, "list_raw", list_raw, raising=False)
    pending = PendingClaims(client, Metrics(), driver="gpu.nvidia.com")
    pods = PendingPods(client, Informers(client), pending)
    gated: dict[str, Any] = {
        "metadata": {"name": "trainer", "namespace": "default", "uid": "p1"},
        "spec": {"containers": [{"name": "main"}], "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]},
    }
    pods.pod_changed("p1", Pod.model_validate(gated))
    assert pods.waiting == {}
    claim = _owned_claim("c", allocated=False)
    pods.claim_changed("c", claim)
    pending.claim_changed("c", claim)
    told: list[object] = []

    async def tell(said: list[tuple[ResourceClaim, Said]]) -> None:
        told.extend(("told", c.metadata.name) for c, _ in said)

    async def check_all(claims: list[ResourceClaim], *args: object, **kw: object) -> dict[str, Said]:
        told.extend(("allocator", c.metadata.name) for c in claims)
        return {}

    monkeypatch.setattr(pending, "tell", tell)
    monkeypatch.setattr(pending, "check_all", check_all)
    classes = {c.metadata.name or "": c for c in load_device_classes()}
    await pods.check_all([claim], classes, grace_seconds=0)
    assert told == [("allocator", "c")] and lists == []
