"""A node's NVLink clique from its GPUs' fabric info, and the Node label that publishes it.

Rules (NVIDIA's DRA driver and GPU feature discovery, see reference/nvidia-dra-driver.md):

- Each GPU answers nvmlDeviceGetGpuFabricInfoV with a cluster UUID, a clique id, a state and a status. The
  GPU is in clique ``<clusterUuid>.<cliqueId>`` when the state is COMPLETED and the status SUCCESS and the
  cluster UUID is not all zeros. NOT_SUPPORTED (no fabric: PCIe cards, Ampere) and an all-zero UUID (HGX
  H100/H200/B200 boards: NVLink inside the node only) mean "no clique"; so does a registration that is not
  COMPLETED or not SUCCESS (the fabric manager has not admitted the GPU, or lost it).
- All GPUs of a node must agree. A node whose GPUs report different cliques is an error (the message names
  the GPUs of each clique). gpudra also counts a node whose GPUs are partly in a clique and partly not as
  "no clique, degraded" (NVIDIA's driver skips the GPUs without one): a tray that lost the fabric on one GPU
  cannot serve a multi-node workload that expects all of its GPUs to share memory, so it leaves the clique
  and its label, and the ComputeDomain status names it.

The label ``nvidia.com/gpu.clique`` (GFD's key and value format) holds the clique of a node in one; it is
removed when the node is in none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpudra.hardware.gpus.inventory import FabricInfo, NodeInventory

CLIQUE_LABEL: Final = "nvidia.com/gpu.clique"
FABRIC_STATE_COMPLETED: Final = 3
FABRIC_STATUS_SUCCESS: Final = 0
_STATE_NAMES: Final = {0: "NOT_SUPPORTED", 1: "NOT_STARTED", 2: "IN_PROGRESS", 3: "COMPLETED"}


@dataclass(frozen=True, slots=True)
class NodeClique:
    """The clique of a node: ``clique_id`` "" when none; ``reason`` says why none; ``problem`` marks a
    state an administrator should look at (GPUs disagree or a GPU lost its fabric), as opposed to hardware
    that simply has no multi-node NVLink."""

    clique_id: str
    reason: str = ""
    problem: bool = False


def _zero(cluster_uuid: str) -> bool:
    return set(cluster_uuid.replace("-", "")) <= {"0"}


def gpu_clique(fabric: FabricInfo | None) -> tuple[str, str]:
    """(clique, "") for a GPU in a clique, else ("", why not)."""
    if fabric is None:
        return "", "fabric info NOT_SUPPORTED"
    if fabric.state != FABRIC_STATE_COMPLETED:
        state = _STATE_NAMES.get(fabric.state, str(fabric.state))
        return "", f"fabric registration state {state}, not COMPLETED"
    if fabric.status != FABRIC_STATUS_SUCCESS:
        return "", f"fabric registration status {fabric.status}, not SUCCESS"
    if _zero(fabric.cluster_uuid):
        return "", "all-zero cluster UUID (NVLink inside the node only)"
    return f"{fabric.cluster_uuid}.{fabric.clique_id}", ""


def _registration_failed(fabric: FabricInfo | None) -> bool:
    return fabric is not None and (
        fabric.state != FABRIC_STATE_COMPLETED or fabric.status != FABRIC_STATUS_SUCCESS
    )


def _gpus(indices: list[int]) -> str:
    return ("GPU " if len(indices) == 1 else "GPUs ") + ", ".join(str(i) for i in indices)


def node_clique(inventory: NodeInventory) -> NodeClique:
    """The node's clique by the rules in the module docstring."""
    if not inventory.gpus:
        return NodeClique("", "the node has no GPUs")
    cliques: dict[str, list[int]] = {}
    outside: dict[str, list[int]] = {}
    for gpu in inventory.gpus:
        clique, why = gpu_clique(gpu.fabric)
        if clique:
            cliques.setdefault(clique, []).append(gpu.index)
        else:
            outside.setdefault(why, []).append(gpu.index)
    if len(cliques) > 1:
        listed = "; ".join(f"{_gpus(i)} in {c}" for c, i in sorted(cliques.items()))
        return NodeClique("", f"the node's GPUs report different NVLink cliques: {listed}", problem=True)
    if cliques and outside:
        ((clique, members),) = cliques.items()
        listed = "; ".join(f"{_gpus(i)}: {why}" for why, i in sorted(outside.items()))
        return NodeClique(
            "",
            f"not all GPUs are in clique {clique} ({_gpus(members)} are): {listed}",
            problem=True,
        )
    if cliques:
        return NodeClique(next(iter(cliques)))
    listed = "; ".join(f"{_gpus(i)}: {why}" for why, i in sorted(outside.items()))
    degraded = any(_registration_failed(gpu.fabric) for gpu in inventory.gpus)
    return NodeClique("", f"no NVLink clique: {listed}", problem=degraded)


def multi_node_nvlink(inventory: NodeInventory) -> bool:
    """Whether the node's GPUs are built for multi-node NVLink (a GB200 NVL72 tray, say): some GPU reports
    fabric info that is not the all-zero "node-local NVLink" answer, whatever its registration state now."""
    for gpu in inventory.gpus:
        fabric = gpu.fabric
        if fabric is None:
            continue
        if _registration_failed(fabric) or not _zero(fabric.cluster_uuid):
            return True
    return False


def clique_label_patch(labels: Mapping[str, str], clique: NodeClique) -> dict[str, Any] | None:
    """The Node merge patch that makes ``nvidia.com/gpu.clique`` say ``clique`` (None: already does)."""
    current = labels.get(CLIQUE_LABEL)
    wanted = clique.clique_id or None
    if current == wanted:
        return None
    return {"metadata": {"labels": {CLIQUE_LABEL: wanted}}}
