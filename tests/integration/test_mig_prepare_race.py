"""The MIG applier and prepare share one rule: a device a claim holds (or is being prepared with) is never
repartitioned, and a device being repartitioned is never prepared. Real ClaimPreparer, real gRPC sockets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _prepare_kit import NAMESPACE, NODE, Node

from gpudra.agent.miglayout.applier import HOLDER, MigApplier
from gpudra.agent.miglayout.journal import PlanJournal
from gpudra.mig.desired import DesiredState


@pytest.fixture
def node(prepare_node: Node) -> Node:
    return prepare_node


async def prepare(node: Node, name: str, device: str) -> Any:
    assert node.kubelet is not None
    ref = await node.claim(name, {"gpu": device})
    return (await node.kubelet.prepare([ref]))[ref.uid]


async def test_a_prepared_gpu_blocks_a_layout_on_it(node: Node, tmp_path: Path) -> None:
    assert (await prepare(node, "train", "gpu-3")).error == ""
    assert node.preparer is not None
    journal = PlanJournal(tmp_path / "plan.json", node=NODE)
    applier = MigApplier(node.backend, journal, node=NODE, holders=node.preparer.reservations)
    entries = ({"devices": [3, 4], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},)
    report, changed = await applier.apply(DesiredState(source="MigLayout", name="l", entries=entries))
    assert (report.state, report.blocked_by, changed) == ("blocked", (f"{NAMESPACE}/train",), False)
    assert not node.fake.gpu(3).mig_current and not node.fake.gpu(4).mig_current


async def test_reserved_devices_are_not_prepared_until_released(node: Node) -> None:
    assert node.preparer is not None
    reservations = node.preparer.reservations
    assert (await prepare(node, "train", "gpu-3")).error == ""
    assert reservations.reserve_devices(HOLDER, {(NODE, "gpu-3")}) == [f"{NAMESPACE}/train"]
    assert reservations.reserve_devices(HOLDER, {(NODE, "gpu-4")}) == []
    refused = await prepare(node, "late", "gpu-4")
    assert "gpu-4 is already prepared for claim MIG repartitioning" in refused.error
    reservations.release_devices(HOLDER)
    assert node.kubelet is not None
    ref = await node.claim("later", {"gpu": "gpu-4"})
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""


async def test_a_prepare_that_read_the_gpus_before_a_repartition_is_retried(node: Node) -> None:
    assert node.preparer is not None
    reservations = node.preparer.reservations
    read = node.backend.read_inventory

    def read_during_a_repartition(*, nvlink_peers: bool = True) -> Any:
        inventory = read(nvlink_peers=nvlink_peers)
        reservations.reserve_devices(HOLDER, {(NODE, "gpu-5")})
        reservations.release_devices(HOLDER)  # the applier changed the GPUs after this prepare read them
        return inventory

    # the ignore below: a race injected into this one backend
    node.backend.read_inventory = read_during_a_repartition  # type: ignore[method-assign]
    refused = await prepare(node, "racing", "gpu-6")
    assert "repartitioned while preparing" in refused.error
    # the ignore below: the race taken out again
    node.backend.read_inventory = read  # type: ignore[method-assign]
    assert node.kubelet is not None
    ref = await node.claim("retried", {"gpu": "gpu-6"})
    assert (await node.kubelet.prepare([ref]))[ref.uid].error == ""
