"""Pure: why a pod not bound yet is not being placed, beside its claims.

- Scheduling gates (``spec.schedulingGates``): kube-scheduler does not consider such a pod, so it neither places it
  nor allocates its claims, however well they fit, until whoever added the gates removes them (Kueue's
  ``kueue.x-k8s.io/admission`` until it admits the pod's workload, most often). ``gpudra explain pod`` and the web
  view say so before whether its claims fit.
- kube-scheduler's last word (the pod's ``PodScheduled`` condition, reason ``Unschedulable``, with the message of its
  latest FailedScheduling): when every claim of the pod fits, what keeps the pod off is not a device (cpu, memory,
  inter-pod affinity, a node filter on a node without devices), and ``gpudra explain pod`` ends with those words."""

from __future__ import annotations

from dataclasses import dataclass

from gpudra.api.core import Pod

KUEUE_GATE = "kueue.x-k8s.io/admission"
"""The gate Kueue puts on the pods it queues (plain pods and pod groups) and removes when it admits them."""


def scheduling_gates(pod: Pod) -> tuple[str, ...]:
    """The names of the pod's scheduling gates (none once it is bound)."""
    if pod.spec.node_name:
        return ()
    return tuple(str(g.get("name") or "") for g in pod.spec.scheduling_gates or ())


def gate_words(gates: tuple[str, ...], namespace: str) -> list[str]:
    """Why a gated pod waits, and for Kueue's gate where to look."""
    words = [
        f"the pod is held by its scheduling gates ({', '.join(gates)}): kube-scheduler neither places it nor"
        " allocates its claims until every gate is removed"
    ]
    if KUEUE_GATE in gates:
        words.append(
            f"Kueue removes {KUEUE_GATE} when it admits the pod's workload (`kubectl get workloads -n {namespace}`"
            " says whether it is admitted, and why not)"
        )
    return words


@dataclass(frozen=True)
class Unschedulable:
    """kube-scheduler's ``PodScheduled`` condition on a pod it could not place."""

    message: str
    since: str
    """When the condition last changed (RFC 3339)."""

    def words(self) -> str:
        return f"kube-scheduler could not place the pod (since {self.since}): {self.message}"


def unschedulable(pod: Pod) -> Unschedulable | None:
    """The pod's ``PodScheduled`` condition when it says kube-scheduler could not place it (a pod not bound)."""
    if pod.spec.node_name or pod.status is None:
        return None
    for condition in pod.status.conditions or []:
        if (condition.get("type"), condition.get("status"), condition.get("reason")) == (
            "PodScheduled",
            "False",
            "Unschedulable",
        ):
            return Unschedulable(
                str(condition.get("message") or ""), str(condition.get("lastTransitionTime") or "")
            )
    return None
