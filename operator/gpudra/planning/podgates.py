"""Pure: a pod held by scheduling gates (``spec.schedulingGates``). kube-scheduler does not consider such a pod, so
it neither places it nor allocates its claims, however well they fit, until whoever added the gates removes them
(Kueue's ``kueue.x-k8s.io/admission`` until it admits the pod's workload, most often). ``gpudra explain pod`` and
the web view say so before whether its claims fit."""

from __future__ import annotations

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
