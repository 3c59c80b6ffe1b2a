"""A node's NVLink clique from its GPUs' fabric info (NVIDIA's "no clique" rules), and its Node label."""

from __future__ import annotations

import pytest

from gpudra.computedomain.clique import (
    CLIQUE_LABEL,
    NodeClique,
    clique_label_patch,
    multi_node_nvlink,
    node_clique,
)
from gpudra.hardware.gpus.inventory import FabricInfo, NodeInventory
from gpudra.hardware.simulated import simulated_backend

RACK = "6b3f7d0e-2c1a-4f55-9e0b-1d2c3b4a5f60"
OTHER = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
ZERO = "00000000-0000-0000-0000-000000000000"


def fabric(cluster: str = RACK, clique: int = 7, state: int = 3, status: int = 0) -> FabricInfo:
    return FabricInfo(cluster_uuid=cluster, clique_id=clique, state=state, status=status)


def tray(*fabrics: FabricInfo | None) -> NodeInventory:
    inventory = simulated_backend("gb200-nvl72", "tray-0").backend.read_inventory()
    gpus = tuple(g.model_copy(update={"fabric": f}) for g, f in zip(inventory.gpus, fabrics, strict=True))
    return inventory.model_copy(update={"gpus": gpus})


@pytest.mark.parametrize(
    ("fabrics", "clique", "problem", "said"),
    [
        ((fabric(),) * 4, f"{RACK}.7", False, ""),
        ((None,) * 4, "", False, "GPUs 0, 1, 2, 3: fabric info NOT_SUPPORTED"),
        ((fabric(ZERO, 0),) * 4, "", False, "all-zero cluster UUID"),
        ((fabric(state=2),) * 4, "", True, "state IN_PROGRESS, not COMPLETED"),
        ((fabric(status=999),) * 4, "", True, "status 999, not SUCCESS"),
        (
            (fabric(), fabric(), fabric(state=1), fabric()),
            "",
            True,
            "GPU 2: fabric registration state NOT_STARTED",
        ),
        ((fabric(), fabric(OTHER), fabric(), fabric()), "", True, f"GPU 1 in {OTHER}.7"),
        ((fabric(), fabric(clique=8), fabric(), fabric()), "", True, "different NVLink cliques"),
    ],
    ids=["rack", "no-fabric", "hgx", "registering", "failed", "one-gpu-lost", "two-clusters", "two-cliques"],
)
def test_node_clique_rules(
    fabrics: tuple[FabricInfo | None, ...], clique: str, problem: bool, said: str
) -> None:
    found = node_clique(tray(*fabrics))
    assert (found.clique_id, found.problem) == (clique, problem)
    assert said in found.reason


def test_simulated_racks_are_cliques_of_18_trays() -> None:
    def clique_of(index: int) -> str:
        node = simulated_backend("gb200-nvl72", f"tray-{index}", fleet_index=index)
        return node_clique(node.backend.read_inventory()).clique_id

    assert clique_of(0) == clique_of(17) != clique_of(18)
    assert clique_of(0).endswith(".32766")


def test_fabric_loss_and_recovery_in_the_simulation() -> None:
    node = simulated_backend("gb200-nvl72", "tray-0")
    before = node_clique(node.backend.read_inventory())
    node.nvml.lose_fabric(1)
    lost = node_clique(node.backend.read_inventory())
    assert lost == NodeClique("", lost.reason, problem=True) and "GPU 1:" in lost.reason
    node.nvml.restore_fabric()
    assert node_clique(node.backend.read_inventory()) == before


@pytest.mark.parametrize(
    ("profile", "expected"),
    [("gb200-nvl72", True), ("dgx-h100", False), ("dgx-a100", False), ("l4x4", False)],
)
def test_multi_node_nvlink_only_on_nvl72_trays(profile: str, expected: bool) -> None:
    assert multi_node_nvlink(simulated_backend(profile, "n").backend.read_inventory()) is expected


def test_a_tray_still_registering_counts_as_multi_node() -> None:
    assert multi_node_nvlink(tray(*(fabric(ZERO, 0, state=1),) * 4))


@pytest.mark.parametrize(
    ("labels", "clique", "patch"),
    [
        ({}, "a.1", {"metadata": {"labels": {CLIQUE_LABEL: "a.1"}}}),
        ({CLIQUE_LABEL: "a.1"}, "a.1", None),
        ({CLIQUE_LABEL: "a.1"}, "b.1", {"metadata": {"labels": {CLIQUE_LABEL: "b.1"}}}),
        ({CLIQUE_LABEL: "a.1"}, "", {"metadata": {"labels": {CLIQUE_LABEL: None}}}),
        ({}, "", None),
    ],
)
def test_clique_label_patch(labels: dict[str, str], clique: str, patch: object) -> None:
    assert clique_label_patch(labels, NodeClique(clique)) == patch
