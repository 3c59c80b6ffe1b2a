"""Structured allocation of DRA devices with Kubernetes' semantics, plus explanations of failures (pure).

Public interface: :class:`ClusterSnapshot` (incremental index of slices and allocations), :class:`Allocator`
(``allocate(node, claims)``, ``find_node(claims, nodes)``, ``commit``), the outcomes :class:`Allocation`,
:class:`Failure`, :class:`NodesFailure`, and their words: :func:`explain_outcome` (an :class:`Explanation`)
and :func:`render_text`. Outside code imports only the names of ``__all__`` (an import-linter contract holds it).

Three rooms inside, each importing only those below it: ``explain/`` (the words of a failure: nearest nodes,
explanations), the engine (the modules at this level: snapshot, requests, search, constraints, the failures'
diagnosis), and ``cel/`` (CEL selectors). The CEL library costs about 0.1 s to load, so the names this face takes
from ``cel.selectors`` load on first use.
"""

from typing import TYPE_CHECKING

from gpudra.allocator.diagnosis import REASONS, Failure, NodesFailure, RequestDiagnosis, SelectorStat
from gpudra.allocator.engine import DEFAULT_KUBE_MINOR, Allocator
from gpudra.allocator.explain.explanation import ClosestDevice, Explanation, NodeLine, Repartition
from gpudra.allocator.explain.nearest import examine
from gpudra.allocator.explain.phrases import meant_class
from gpudra.allocator.explain.wording import explain_outcome, render_text
from gpudra.allocator.kubeerrors import FILTER_PREFIX
from gpudra.allocator.pools import DeviceEntry, DeviceId, NodeInfo, make_entry
from gpudra.allocator.requests import RequestProblem, RequestSpec, build_claim, claim_key, evaluate, spec_json
from gpudra.allocator.result import Allocation, ClaimAllocation
from gpudra.allocator.snapshot import ClusterSnapshot
from gpudra.allocator.taintrules import Eviction, claim_eviction, taint_slice, unsupported_selector

if TYPE_CHECKING:
    from gpudra.allocator.cel.selectors import (
        MAX_EXPRESSION_LENGTH,
        CelCompileError,
        CelCostError,
        CelResultTypeError,
        check_new_selector,
    )

_FROM_CEL = frozenset(
    {"MAX_EXPRESSION_LENGTH", "CelCompileError", "CelCostError", "CelResultTypeError", "check_new_selector"}
)


def __getattr__(name: str) -> object:
    if name in _FROM_CEL:
        from gpudra.allocator.cel import selectors

        return getattr(selectors, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_KUBE_MINOR",
    "FILTER_PREFIX",
    "MAX_EXPRESSION_LENGTH",
    "REASONS",
    "Allocation",
    "Allocator",
    "CelCompileError",
    "CelCostError",
    "CelResultTypeError",
    "ClaimAllocation",
    "ClosestDevice",
    "ClusterSnapshot",
    "DeviceEntry",
    "DeviceId",
    "Eviction",
    "Explanation",
    "Failure",
    "NodeInfo",
    "NodeLine",
    "NodesFailure",
    "Repartition",
    "RequestDiagnosis",
    "RequestProblem",
    "RequestSpec",
    "SelectorStat",
    "build_claim",
    "check_new_selector",
    "claim_eviction",
    "claim_key",
    "evaluate",
    "examine",
    "explain_outcome",
    "make_entry",
    "meant_class",
    "render_text",
    "spec_json",
    "taint_slice",
    "unsupported_selector",
]
