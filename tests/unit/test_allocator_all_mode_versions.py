"""An ``All`` request meeting an incomplete or invalid pool, by Kubernetes version.

Through 1.37 Kubernetes' allocator answers the node with an error, and kube-scheduler aborts the pod's whole
scheduling attempt, even where another node fits. From 1.38 (kubernetes#141898, in v0.38.0-beta.0: the error wraps
``ErrFailedAllocationOnNode``) only that node is unsuitable, in the same words, and another node can be chosen. A
selector failing at runtime and an ``All`` request breaking a constraint abort the attempt in both. The oracle
(v0.37.2) checks only the 1.37 rows, so these are table tests against the 1.38.0-beta.0 source."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from _allocator_kit import CLASSES, claim, gpu, gpus, make_allocator, match, req, slice_

from gpudra.allocator import Allocation, Failure, NodeInfo, NodesFailure, explain_outcome
from gpudra.api.dra import DeviceRequestAllocationResult, ResourceClaim, ResourceSlice
from gpudra.controller.explaining import explain, explanation, load_view, view_from_wire
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import DEVICE_CLASSES, NAMESPACES, NODES, RESOURCE_CLAIMS, RESOURCE_SLICES

UPDATING = (
    "claim default/c, request gpu: asks for all devices, but resource pool gpu.nvidia.com/{} is currently {}"
)


def incomplete_n1() -> list[ResourceSlice]:
    """n1's pool announces two slices and has one; n2 has two free GPUs."""
    return [slice_("n1", [gpu("gpu-0")], count=2), gpus("n2", 2)]


def invalid_n1() -> list[ResourceSlice]:
    """n1's pool names gpu-0 twice; n2 has two free GPUs."""
    return [
        slice_("n1", [gpu("gpu-0")], count=2, name="n1-a"),
        slice_("n1", [gpu("gpu-0")], count=2, name="n1-b"),
        gpus("n2", 2),
    ]


def all_gpus() -> ResourceClaim:
    return claim("c", req(mode="All"))


@dataclass(frozen=True)
class Row:
    id: str
    minor: int
    slices: list[ResourceSlice]
    claim: ResourceClaim
    node: str | None
    """The node the pod gets, or None."""
    aborts: str
    """Kubernetes' error that aborts the attempt ("" when none does)."""


ROWS = [
    Row(
        "incomplete-1.37-aborts",
        37,
        incomplete_n1(),
        all_gpus(),
        None,
        UPDATING.format("n1", "being updated"),
    ),
    Row("incomplete-1.38-other-node", 38, incomplete_n1(), all_gpus(), "n2", ""),
    Row("incomplete-1.39-other-node", 39, incomplete_n1(), all_gpus(), "n2", ""),
    Row("invalid-1.37-aborts", 37, invalid_n1(), all_gpus(), None, UPDATING.format("n1", "invalid")),
    Row("invalid-1.38-other-node", 38, invalid_n1(), all_gpus(), "n2", ""),
    Row(
        "incomplete-1.34-aborts",
        34,
        incomplete_n1(),
        all_gpus(),
        None,
        UPDATING.format("n1", "being updated"),
    ),
    Row(
        "selector-error-1.38-still-aborts",
        38,
        incomplete_n1(),
        claim("c", req("gpu", "gpu.nvidia.com", "boom", mode="All")),
        None,
        # n1 fails on its pool before any selector runs there; n2's devices then fail the selector
        "claim default/c: selector #0 on device gpu.nvidia.com/n2/gpu-0: CEL runtime error: no such key: boom. "
        "consider using CEL optional chaining (.? followed by orValue()) or guarding the check with has() for "
        "optional fields",
    ),
    Row(
        "constraint-1.38-still-aborts",
        38,
        [gpus("n1", 2)],
        claim("c", req(mode="All"), constraints=[match("gpu.nvidia.com/uuid")]),
        None,
        "claim default/c, request gpu: cannot add device gpu.nvidia.com/n1/gpu-1 because a claim constraint would "
        "not be satisfied",
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_all_mode_pool_problems_by_version(row: Row) -> None:
    outcome = make_allocator(row.slices, kube_minor=row.minor).find_node([row.claim])
    if row.node is not None:
        assert isinstance(outcome, Allocation), outcome
        assert outcome.node == row.node
        pools = [r.pool for c in outcome.claims if c.result.devices for r in c.result.devices.results or []]
        assert set(pools) == {row.node}
    else:
        assert isinstance(outcome, Failure), outcome
        assert outcome.aborts == row.aborts


@pytest.mark.parametrize(("minor", "aborts"), [(37, True), (38, False)])
def test_on_its_own_the_node_is_unsuitable_from_1_38(minor: int, aborts: bool) -> None:
    """``allocate`` on the one node: an error through 1.37, the node's failure with its reason from 1.38."""
    outcome = make_allocator(incomplete_n1(), kube_minor=minor).allocate(NodeInfo("n1"), [all_gpus()])
    assert isinstance(outcome, Failure)
    assert (outcome.node, outcome.reason) == ("n1", "PoolIncomplete")
    assert bool(outcome.aborts) is aborts


def test_from_1_38_a_node_that_fits_nowhere_else_is_one_reason_among_the_nodes() -> None:
    """n2's only GPU is in use: no node fits, and n1 is counted under PoolIncomplete beside it."""
    slices = [slice_("n1", [gpu("gpu-0")], count=2), gpus("n2", 1)]
    allocator = make_allocator(slices, kube_minor=38)
    allocator.snapshot.mark_allocated(_held("n2", "gpu-0"))
    outcome = allocator.find_node([all_gpus()])
    assert isinstance(outcome, NodesFailure), outcome
    assert outcome.by_reason == {"PoolIncomplete": 1, "DevicesInUse": 1}
    assert not any(f.aborts for f in outcome.failures)
    said = explain_outcome(outcome, snapshot=allocator.snapshot)
    assert [(line.node, line.reason) for line in said.nodes] == [
        ("n2", "DevicesInUse"),
        ("n1", "PoolIncomplete"),
    ]
    assert "aborts" not in said.text()


def test_through_1_37_the_explanation_says_the_attempt_is_aborted() -> None:
    allocator = make_allocator(incomplete_n1(), kube_minor=37)
    outcome = allocator.find_node([all_gpus()])
    assert isinstance(outcome, Failure)
    text = explain_outcome(outcome, snapshot=allocator.snapshot).text()
    assert text.startswith("n1 is republishing its devices (pool gpu.nvidia.com/n1 has 1 of 2 slices)")
    assert "kube-scheduler aborts the pod's scheduling attempt at this error" in text


def _held(node: str, device: str) -> list[DeviceRequestAllocationResult]:
    return [DeviceRequestAllocationResult(request="x", driver="gpu.nvidia.com", pool=node, device=device)]


def _wire(slices: list[ResourceSlice]) -> dict[str, list[dict[str, Any]]]:
    return {
        "slices": [s.to_wire() for s in slices],
        "classes": [c.to_wire() for c in CLASSES],
        "claims": [],
        "namespaces": [],
        "nodes": [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}} for n in ("n1", "n2")],
    }


@pytest.mark.parametrize(("minor", "node"), [(37, None), (38, "n2")])
def test_the_controllers_explanation_follows_the_version(minor: int, node: str | None) -> None:
    """What ``gpudra explain``, the controller's Events and the web view say (their shared view)."""
    objects = _wire(incomplete_n1())
    view = view_from_wire(
        objects["slices"],
        objects["classes"],
        objects["claims"],
        objects["namespaces"],
        objects["nodes"],
        kube_minor=minor,
    )
    outcome = explain(view, all_gpus())
    if node is None:
        assert isinstance(outcome, Failure) and outcome.aborts
        assert "aborts the pod's scheduling attempt" in explanation(view, all_gpus(), outcome, None).text()
    else:
        assert isinstance(outcome, Allocation) and outcome.node == node


class _Server:
    """Answers what ``load_view`` reads: the version and the lists."""

    def __init__(self, minor: int, objects: dict[str, list[dict[str, Any]]]) -> None:
        self.minor = minor
        self.objects = objects

    async def server_version(self) -> tuple[int, int]:
        return 1, self.minor

    async def list(self, res: Any) -> tuple[list[Any], str]:
        key = {RESOURCE_SLICES: "slices", DEVICE_CLASSES: "classes", RESOURCE_CLAIMS: "claims",
               NAMESPACES: "namespaces", NODES: "nodes"}[res]  # fmt: skip
        return [res.model.model_validate(o) for o in self.objects[key]], "1"


@pytest.mark.parametrize(("minor", "allocated"), [(37, False), (38, True)])
async def test_load_view_follows_the_api_servers_version(minor: int, allocated: bool) -> None:
    server: Any = _Server(minor, _wire(incomplete_n1()))
    client: KubeClient = server
    view = await load_view(client)
    assert isinstance(explain(view, all_gpus()), Allocation) is allocated
