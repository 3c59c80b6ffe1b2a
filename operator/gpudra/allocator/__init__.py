"""Structured allocation of DRA devices with Kubernetes' semantics, plus explanations of failures (pure).

Public interface: :class:`ClusterSnapshot` (incremental index of slices and allocations), :class:`Allocator`
(``allocate(node, claims)``, ``find_node(claims, nodes)``, ``commit``), the outcomes :class:`Allocation`,
:class:`Failure`, :class:`NodesFailure`, and :func:`render_text`.
"""

from gpudra.allocator.engine import Allocator
from gpudra.allocator.explain import REASONS, Failure, NodesFailure, RequestDiagnosis, render_text
from gpudra.allocator.pools import DeviceId, NodeInfo
from gpudra.allocator.result import Allocation, ClaimAllocation
from gpudra.allocator.snapshot import ClusterSnapshot

__all__ = [
    "REASONS",
    "Allocation",
    "Allocator",
    "ClaimAllocation",
    "ClusterSnapshot",
    "DeviceId",
    "Failure",
    "NodeInfo",
    "NodesFailure",
    "RequestDiagnosis",
    "render_text",
]
