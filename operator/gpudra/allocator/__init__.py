"""Structured allocation of DRA devices with Kubernetes' semantics, plus explanations of failures (pure).

Public interface: :class:`ClusterSnapshot` (incremental index of slices and allocations), :class:`Allocator`
(``allocate(node, claims)``, ``find_node(claims, nodes)``, ``commit``), the outcomes :class:`Allocation`,
:class:`Failure`, :class:`NodesFailure`, and their words: :func:`explain_outcome` (an :class:`Explanation`)
and :func:`render_text`.
"""

from gpudra.allocator.diagnosis import REASONS, Failure, NodesFailure, RequestDiagnosis
from gpudra.allocator.engine import Allocator
from gpudra.allocator.explain.explanation import Explanation
from gpudra.allocator.explain.wording import explain_outcome, render_text
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
    "Explanation",
    "Failure",
    "NodeInfo",
    "NodesFailure",
    "RequestDiagnosis",
    "explain_outcome",
    "render_text",
]
