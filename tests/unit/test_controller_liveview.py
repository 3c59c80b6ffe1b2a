"""The controller explains pending claims over the cluster its informers handed it (slices, classes, nodes, every
claim's allocation), kept in step change by change: an explanation round lists nothing from the API server (at
1,000 nodes a listed view cost about 2 s of CPU a round), and a device freed by a deleted claim counts as free at
once."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.allocator import NodesFailure
from gpudra.api.core import Node, Pod
from gpudra.api.dra import DeviceClass, ResourceClaim, ResourceSlice
from gpudra.cluster.fleet import parse_fleet
from gpudra.cluster.simslices import node_objects
from gpudra.controller import liveview as liveview_module
from gpudra.controller import pending as pending_module
from gpudra.controller.explaining import ClusterView, Outcome, explain
from gpudra.controller.pending import PendingClaims
from gpudra.devices.classes import load_device_classes
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import EVENTS, Resource
from gpudra.metrics import Metrics
from gpudra.planning import podnodes

NODE = "l4x4-0"


class _NoLists(KubeClient):
    """A client that answers /version, records the Events posted, and fails any list."""

    posted: list[dict[str, Any]]

    async def server_version(self) -> tuple[int, int]:
        return 1, 37

    async def create(
        self, res: Any, body: Any, namespace: str | None = None, *, dry_run: bool = False
    ) -> Any:
        assert res == EVENTS
        self.posted.append(body)
        return body

    async def list_raw(self, res: Resource, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"an explanation round listed {res.plural}")

    async def list(self, res: Any, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"an explanation round listed {res.plural}")


def _claim(name: str, device: str | None = None) -> ResourceClaim:
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": name},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
        },
    }
    if device is not None:
        results = [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": NODE, "device": device}]
        body["status"] = {"allocation": {"devices": {"results": results}}}
    return ResourceClaim.model_validate(body)


@pytest.fixture
def pending() -> PendingClaims:
    client = _NoLists.__new__(_NoLists)
    client.posted = []
    pending = PendingClaims(client, Metrics(), driver="gpu.nvidia.com")
    node, *slices = node_objects(parse_fleet("l4x4:1", {"l4x4"})[0])
    pending.live.node_changed(NODE, Node.model_validate(node))
    for body in slices:
        pending.live.slice_changed(body["metadata"]["name"], ResourceSlice.model_validate(body))
    for device_class in load_device_classes():
        pending.live.class_changed(device_class.metadata.name or "", device_class)
    return pending


def _classes() -> dict[str, DeviceClass]:
    return {c.metadata.name or "": c for c in load_device_classes()}


async def test_a_claim_waiting_on_busy_gpus_is_explained_without_a_list_and_names_their_holders(
    pending: PendingClaims,
) -> None:
    for i in range(4):
        pending.claim_changed(f"holder-{i}", _claim(f"holder-{i}", f"gpu-{i}"))
    pending.claim_changed("waiting", _claim("waiting"))

    said = await pending.check_all([pending.unallocated["waiting"]], _classes())

    assert list(said) == ["waiting"]
    posted = pending._client.posted  # type: ignore[attr-defined]
    assert [e["involvedObject"]["name"] for e in posted] == ["waiting"]
    assert "default/holder-0" in posted[0]["message"], posted[0]["message"]


async def test_a_gpu_freed_by_a_deleted_claim_counts_as_free_in_the_next_round(
    pending: PendingClaims,
) -> None:
    for i in range(4):
        pending.claim_changed(f"holder-{i}", _claim(f"holder-{i}", f"gpu-{i}"))
    pending.claim_changed("waiting", _claim("waiting"))
    assert await pending.check_all([pending.unallocated["waiting"]], _classes())

    pending.claim_changed("holder-2", None)  # deleted: gpu-2 is free

    assert await pending.check_all([pending.unallocated["waiting"]], _classes()) == {}
    assert "waiting" not in pending.said  # it fits now; the scheduler will get to it


def _asking_for(name: str, product: str, *, and_any_gpu: bool = False) -> ResourceClaim:
    """A claim of one GPU of this model (and with ``and_any_gpu``, one more of any model)."""
    expression = f'device.attributes["gpu.nvidia.com"].productName == "{product}"'
    exactly = {"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {"expression": expression}}]}
    requests: list[dict[str, Any]] = [{"name": "gpu", "exactly": exactly}]
    if and_any_gpu:
        requests.append({"name": "any", "exactly": {"deviceClassName": "gpu.nvidia.com"}})
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": name},
        "spec": {"devices": {"requests": requests}},
    }
    return ResourceClaim.model_validate(body)


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the claims the explanation rounds ask the allocator about, in order."""
    names: list[str] = []

    def counted(view: ClusterView, claim: ResourceClaim) -> Outcome:
        names.append(claim.metadata.name or "")
        return explain(view, claim)

    monkeypatch.setattr(pending_module, "explain", counted)
    return names


async def test_a_claim_no_device_matches_is_answered_once_until_the_slices_change(
    pending: PendingClaims, asked: list[str]
) -> None:
    pending.claim_changed("first", _asking_for("first", "NVIDIA H100 80GB HBM3"))
    said = await pending.check_all([pending.unallocated["first"]], _classes())
    assert said["first"].reason == "NoMatchingDevice"

    # GPUs taken and given back change nothing for a claim no device matches: the next round (another claim of
    # the same shape) says the same without asking the allocator again
    pending.claim_changed("holder", _claim("holder", "gpu-1"))
    pending.claim_changed("second", _asking_for("second", "NVIDIA H100 80GB HBM3"))
    again = await pending.check_all([pending.unallocated["second"]], _classes())
    assert again["second"] == said["first"]
    assert asked == ["first"]

    # a node with that GPU publishes its slices: the next round asks again, and the claim fits there
    node, *slices = node_objects(parse_fleet("dgx-h100:1", {"dgx-h100"})[0])
    pending.live.node_changed("dgx-h100-0", Node.model_validate(node))
    for body in slices:
        pending.live.slice_changed(body["metadata"]["name"], ResourceSlice.model_validate(body))
    assert await pending.check_all([pending.unallocated["second"]], _classes()) == {}
    assert asked == ["first", "second"]


async def test_a_claim_waiting_on_busy_gpus_is_asked_about_every_round(
    pending: PendingClaims, asked: list[str]
) -> None:
    for i in range(4):
        pending.claim_changed(f"holder-{i}", _claim(f"holder-{i}", f"gpu-{i}"))
    pending.claim_changed("waiting", _claim("waiting"))
    first = await pending.check_all([pending.unallocated["waiting"]], _classes())
    second = await pending.check_all([pending.unallocated["waiting"]], _classes())
    assert first == second and asked == ["waiting", "waiting"]


def test_an_answer_is_settled_only_when_no_request_of_the_claim_matches_anywhere(
    pending: PendingClaims,
) -> None:
    view = pending.live.view([])
    nowhere = _asking_for("nowhere", "NVIDIA H100 80GB HBM3")
    for i in range(4):
        pending.claim_changed(f"holder-{i}", _claim(f"holder-{i}", f"gpu-{i}"))
    both = _asking_for("both", "NVIDIA H100 80GB HBM3", and_any_gpu=True)  # the node's GPUs are all busy

    alone = view.allocator.find_node([nowhere], view.nodes)
    with_busy = view.allocator.find_node([both], view.nodes)

    assert isinstance(alone, NodesFailure) and alone.settled
    assert isinstance(with_busy, NodesFailure) and not with_busy.settled


def test_warming_up_indexes_every_published_device_before_the_first_round(pending: PendingClaims) -> None:
    index = pending.live.snapshot.index
    assert not index.groups  # the slices handed in are indexed when first read

    pending.live.warm()

    assert sum(g.count for g in index.groups.values()) == 4  # the l4x4 node's four GPUs


def _add_node(pending: PendingClaims, profile: str, index: int = 0, **spec: Any) -> str:
    """Node ``index`` of ``profile`` publishing its slices (``spec``: its Node's spec, taints say); its name."""
    node, *slices = node_objects(parse_fleet(f"{profile}:{index + 1}", {profile})[index])
    node["spec"] = {**(node.get("spec") or {}), **spec}
    name = str(node["metadata"]["name"])
    pending.live.node_changed(name, Node.model_validate(node))
    for body in slices:
        pending.live.slice_changed(body["metadata"]["name"], ResourceSlice.model_validate(body))
    return name


H100 = "NVIDIA H100 80GB HBM3"
TRAIN_ONLY = "taint dedicated=train:NoSchedule not tolerated"


async def test_a_claim_that_fits_only_where_its_pod_may_not_go_is_explained_over_the_nodes_it_may(
    pending: PendingClaims, asked: list[str]
) -> None:
    _add_node(pending, "dgx-h100")
    pending.claim_changed("picky", _asking_for("picky", H100))
    claim = pending.unallocated["picky"]
    assert await pending.check_all([claim], _classes()) == {}  # it fits dgx-h100-0

    said = await pending.check_all([claim], _classes(), kept_off={"picky": {"dgx-h100-0": TRAIN_ONLY}})

    assert said["picky"].reason == "NoMatchingDevice"
    headline, _, rest = said["picky"].text.partition(". kube-scheduler's")
    assert headline.startswith("no GPU matches request gpu: 4 NVIDIA L4 fail only"), (
        said
    )  # dgx-h100-0 left out
    assert rest.startswith(
        f" node filters keep the pod off 1 of 2 nodes with devices: dgx-h100-0: {TRAIN_ONLY}"
    )
    posted = pending._client.posted  # type: ignore[attr-defined]
    assert [e["message"] for e in posted] == [said["picky"].text]


async def test_a_claim_whose_pod_may_go_to_no_node_with_devices_is_said_so_without_the_allocator(
    pending: PendingClaims, asked: list[str]
) -> None:
    pending.claim_changed("nowhere", _claim("nowhere"))
    cpu_only = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu-node"}}
    pending.live.node_changed("cpu-node", Node.model_validate(cpu_only))  # the pod may go there: no devices
    kept = {
        NODE: "does not match the pod's nodeSelector pool=none",
        "cpu-node-2": "cordoned (spec.unschedulable)",
    }

    said = await pending.check_all([pending.unallocated["nowhere"]], _classes(), kept_off={"nowhere": kept})

    assert said["nowhere"].reason == "NoNodeForPod" and asked == []
    assert said["nowhere"].text.endswith(  # a node that publishes no devices is not named
        ". kube-scheduler's node filters keep the pod off the only node with devices:"
        f" {NODE}: does not match the pod's nodeSelector pool=none"
    ), said


def _pod(**spec: Any) -> Pod:
    return Pod.model_validate({"metadata": {"name": "p", "namespace": "default"}, "spec": spec})


def test_what_keeps_pods_off_nodes_is_found_once_for_pods_alike_until_a_node_changes(
    pending: PendingClaims, monkeypatch: pytest.MonkeyPatch
) -> None:
    taint = {"key": "dedicated", "value": "train", "effect": "NoSchedule"}
    name = _add_node(pending, "dgx-h100", taints=[taint])
    found: list[int] = []
    real = podnodes.kept_off

    def counting(pod: Any, nodes: Any) -> dict[str, str]:
        found.append(1)
        return real(pod, nodes)

    monkeypatch.setattr(liveview_module, "kept_off", counting)
    first, second = _pod(nodeSelector={"a": "b"}), _pod(nodeSelector={"a": "b"}, restartPolicy="Never")
    selector = "does not match the pod's nodeSelector a=b"
    assert pending.live.kept_off(first) == pending.live.kept_off(second) == {NODE: selector, name: TRAIN_ONLY}
    assert len(found) == 1
    tolerant = _pod(tolerations=[{"key": "dedicated", "operator": "Exists"}])
    assert pending.live.kept_off(tolerant) == {} and len(found) == 2

    _add_node(pending, "dgx-h100")  # the taint is taken off

    assert pending.live.kept_off(first) == {NODE: selector, name: selector}
    assert len(found) == 3


async def test_the_mig_planner_repartitions_no_gpu_on_a_node_the_claims_pod_may_not_go_to(
    pending: PendingClaims,
) -> None:
    first, second = _add_node(pending, "dgx-a100"), _add_node(pending, "dgx-a100", 1)
    selector = {"cel": {"expression": 'device.attributes["gpu.nvidia.com"].profile == "7g.40gb"'}}
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "big", "namespace": "default", "uid": "big"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "mig", "exactly": {"deviceClassName": "mig.nvidia.com", "selectors": [selector]}}
                ]
            }
        },
    }
    pending.claim_changed("big", ResourceClaim.model_validate(body))
    claim = pending.unallocated["big"]
    said = await pending.check_all([claim], _classes())
    assert said["big"].text.startswith(f"would fit on {first} if its MIG layout had a 7g.40gb free"), said

    said = await pending.check_all([claim], _classes(), kept_off={"big": {first: TRAIN_ONLY}})

    assert said["big"].text.startswith(
        f"would fit on {second} if its MIG layout had a 7g.40gb free (the MIG planner can do this: GPU 0: destroy"
    ), said
    assert (
        f". kube-scheduler's node filters keep the pod off 1 of 3 nodes with devices: {first}: "
        in said["big"].text
    )
