"""The stand-in scheduler's node filtering before DRA, over the control plane's caches: kube-scheduler's filters
(``predicates``) with every node's usage kept up to date from pod events and this scheduler's own bindings.

The list handed to the allocator stays the same object while the filters' answer does not change, so that the
allocator's first-fit scan can resume where the previous pod of the same shape left off.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpudra.allocator import NodeInfo
from gpudra.cluster.controlplane import predicates
from gpudra.cluster.controlplane.state import ClusterState
from gpudra.kube.events import EventRecorder
from gpudra.planning.podnodes import node_affinity, taints

_FINISHED = ("Succeeded", "Failed")
_CACHE_LIMIT = 256


@dataclass(frozen=True)
class Verdict:
    """The nodes a pod may go to, and for the others how many failed by which reason."""

    nodes: list[NodeInfo]
    reasons: Counter[str]
    total: int

    def message(self) -> str:
        return predicates.unschedulable_message(self.total, self.reasons)


class NodeFilter:
    def __init__(self, state: ClusterState, events: EventRecorder) -> None:
        self._state = state
        self._events = events
        self._pods: dict[
            str, tuple[str, dict[str, int], predicates.Placed]
        ] = {}  # uid -> node, requests, placed
        self._used: dict[str, Counter[str]] = {}  # node -> requests of its pods
        self._guards: set[str] = set()  # uids of placed pods with required anti-affinity
        self._static: dict[tuple[int, str], list[NodeInfo]] = {}
        self._dynamic: dict[tuple[int, frozenset[str]], list[NodeInfo]] = {}
        self._told: set[tuple[str, str]] = set()  # (pod uid, field) warned about

    # ---- usage -----------------------------------------------------------------------------------------------
    def pod_event(self, kind: str, body: dict[str, Any], ignore: Iterable[str] = ()) -> None:
        """Keep usage in step with a pod: counted on its node while bound and not finished."""
        uid = str(body["metadata"].get("uid") or "")
        node = str((body.get("spec") or {}).get("nodeName") or "")
        phase = (body.get("status") or {}).get("phase")
        if kind == "DELETED" or phase in _FINISHED:
            self.forget(uid)
        elif node:
            self.assume(body, node, ignore)
        # not bound in this event: an assumed binding stays (the event may predate it; a failed one is forgotten)

    def assume(self, body: dict[str, Any], node: str, ignore: Iterable[str] = ()) -> None:
        """Count the pod on ``node`` (this scheduler's binding, before the pod's event shows it)."""
        uid = str(body["metadata"].get("uid") or "")
        if uid in self._pods and self._pods[uid][0] == node:
            return
        self.forget(uid)
        requests = predicates.pod_requests(body, ignore=ignore)
        placed = predicates.placed(body, node)
        self._pods[uid] = (node, requests, placed)
        self._used.setdefault(node, Counter()).update(requests)
        if placed.anti_affinity:
            self._guards.add(uid)

    def forget(self, uid: str) -> None:
        found = self._pods.pop(uid, None)
        self._guards.discard(uid)
        if found is not None:
            self._used[found[0]].subtract(found[1])

    def load(self, node: str) -> int:
        return self._used.get(node, Counter())["pods"]

    # ---- filtering -------------------------------------------------------------------------------------------
    def feasible(self, pod: dict[str, Any], nodes: list[NodeInfo], ignore: Iterable[str] = ()) -> Verdict:
        """The nodes among ``nodes`` that pass every filter, in the same order; with no node left, why."""
        spec = pod.get("spec") or {}
        static_key = json.dumps(
            [
                spec.get("nodeSelector"),
                (spec.get("affinity") or {}).get("nodeAffinity"),
                spec.get("tolerations"),
            ],
            sort_keys=True,
        )
        static = self._static.get((id(nodes), static_key))
        if static is None:
            static = [n for n in nodes if self._static_reason(pod, n) is None]
            if len(self._static) > _CACHE_LIMIT:
                self._static.clear()
            self._static[(id(nodes), static_key)] = static
        requests = predicates.pod_requests(pod, ignore=ignore)
        view = self._affinity_view(pod)
        reasons: Counter[str] = Counter()
        removed: set[str] = set()
        for node in static:
            whys = self._dynamic_reasons(pod, node, requests, view)
            if whys:
                removed.add(node.name)
                reasons.update(whys)
        if not removed:
            kept = static
        else:
            key = (id(static), frozenset(removed))
            kept = self._dynamic.get(key) or [n for n in static if n.name not in removed]
            if len(self._dynamic) > _CACHE_LIMIT:
                self._dynamic.clear()
            self._dynamic[key] = kept
        if not kept:
            reasons.update(why for n in nodes if (why := self._static_reason(pod, n)) is not None)
        return Verdict(kept, reasons, len(nodes))

    def _static_reason(self, pod: dict[str, Any], node: NodeInfo) -> str | None:
        body = self._state.nodes.cache.get(("", node.name)) or {}
        return taints(pod, body) or node_affinity(pod, body)  # kube-scheduler's plugin order

    def _dynamic_reasons(
        self,
        pod: dict[str, Any],
        node: NodeInfo,
        requests: dict[str, int],
        view: predicates.AffinityView | None,
    ) -> list[str]:
        body = self._state.nodes.cache.get(("", node.name)) or {}
        used = self._used.get(node.name, Counter())
        free = {k: v - used[k] for k, v in predicates.allocatable(body).items()}
        whys = predicates.resources(requests, free)  # a node fails by the first plugin that refuses it
        affinity = predicates.inter_pod_affinity(pod, body, view) if view is not None and not whys else None
        return [affinity] if affinity else whys

    def _affinity_view(self, pod: dict[str, Any]) -> predicates.AffinityView | None:
        """What inter-pod affinity needs; None when neither the pod nor a placed pod has required terms."""
        if predicates.required_terms(pod, "podAffinity") or predicates.required_terms(pod, "podAntiAffinity"):
            placed = [p for _, _, p in self._pods.values()]
        elif self._guards:
            placed = [self._pods[uid][2] for uid in self._guards]
        else:
            return None
        labels = {
            name: (b.get("metadata") or {}).get("labels") or {}
            for (_, name), b in self._state.nodes.cache.items()
        }
        return predicates.AffinityView(placed, labels)

    # ---- telling the pod -------------------------------------------------------------------------------------
    async def tell_unsupported(self, pod: dict[str, Any], known_priority_classes: Iterable[str]) -> None:
        """One Warning Event per field the pod sets that this scheduler does not implement."""
        uid = str(pod["metadata"].get("uid") or "")
        for path, feature in predicates.unsupported(pod, known_priority_classes=known_priority_classes):
            if (uid, path) in self._told:
                continue
            self._remember((uid, path))
            await self._events.post(
                pod, "Warning", "SchedulingFieldIgnored",
                f"{path}: the embedded cluster's stand-in scheduler does not implement {feature}; the pod is "
                "scheduled as if it were not set (kube-scheduler would honour it)",
            )  # fmt: skip

    def _remember(self, told: tuple[str, str]) -> None:
        if len(self._told) > 50_000:
            self._told.clear()
        self._told.add(told)

    @staticmethod
    def gated(pod: dict[str, Any]) -> bool:
        """Whether scheduling gates hold the pod back (it is scheduled once they are removed). As kube-scheduler,
        no Event: the API server gave the pod its ``SchedulingGated`` condition when it was created."""
        return bool((pod.get("spec") or {}).get("schedulingGates"))
