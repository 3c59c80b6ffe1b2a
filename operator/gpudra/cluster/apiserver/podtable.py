"""The Ready, Status and Restarts cells of ``kubectl get pods``, computed as kube-apiserver's pod printer does.

Status is the phase, or the reason a container gives (``ContainerCreating``, ``Init:0/1``, ``CrashLoopBackOff``,
``Completed``...), or ``Terminating``; Ready counts ready containers and started sidecars over the containers
plus sidecars; Restarts adds ``(5m ago)`` after a restart.
"""

from __future__ import annotations

from typing import Any


def _is_sidecar(container: dict[str, Any] | None) -> bool:
    return bool(container) and (container or {}).get("restartPolicy") == "Always"


def _condition_true(status: dict[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in status.get("conditions") or [])


def _terminated_reason(terminated: dict[str, Any], prefix: str = "") -> str:
    if terminated.get("reason"):
        return prefix + str(terminated["reason"])
    if terminated.get("signal"):
        return f"{prefix}Signal:{terminated['signal']}"
    return f"{prefix}ExitCode:{terminated.get('exitCode', 0)}"


class _Restarts:
    def __init__(self) -> None:
        self.count = 0
        self.last = ""  # RFC 3339 of the latest finishedAt of a previous termination

    def add(self, status: dict[str, Any]) -> None:
        self.count += int(status.get("restartCount") or 0)
        finished = ((status.get("lastState") or {}).get("terminated") or {}).get("finishedAt")
        if isinstance(finished, str) and finished > self.last:
            self.last = finished


def pod_cells(pod: dict[str, Any], age: Any) -> tuple[str, str, str]:
    """(Ready, Status, Restarts) of a pod; ``age`` turns an RFC 3339 time into ``5m``."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    reason = str(status.get("reason") or status.get("phase") or "")
    if any(
        c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated"
        for c in status.get("conditions") or []
    ):
        reason = "SchedulingGated"
    init_specs = {str(c.get("name")): c for c in spec.get("initContainers") or []}
    total = len(spec.get("containers") or []) + sum(1 for c in init_specs.values() if _is_sidecar(c))
    ready = 0
    every, sidecars = _Restarts(), _Restarts()
    initializing = False
    for index, container in enumerate(status.get("initContainerStatuses") or []):
        every.add(container)
        sidecar = _is_sidecar(init_specs.get(str(container.get("name"))))
        if sidecar:
            sidecars.add(container)
        state = container.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and not terminated.get("exitCode"):
            continue
        if sidecar and container.get("started"):
            ready += 1 if container.get("ready") else 0
            continue
        if terminated:
            reason = _terminated_reason(terminated, "Init:")
        elif waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = f"Init:{waiting['reason']}"
        else:
            reason = f"Init:{index}/{len(init_specs)}"
        initializing = True
        break
    restarts = every
    if not initializing or _condition_true(status, "Initialized"):
        restarts = sidecars
        running, error = False, ""
        for container in reversed(status.get("containerStatuses") or []):
            restarts.add(container)
            state = container.get("state") or {}
            if (state.get("waiting") or {}).get("reason"):
                reason = str(state["waiting"]["reason"])
            elif state.get("terminated") is not None:
                reason = _terminated_reason(state["terminated"])
                if state["terminated"].get("exitCode"):
                    error = reason
            elif container.get("ready") and state.get("running") is not None:
                running = True
                ready += 1
        if reason == "Completed":
            if running and _condition_true(status, "Ready"):
                reason = "Running"
            elif error:
                reason = error
            elif running:
                reason = "NotReady"
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp") and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif meta.get("deletionTimestamp") and status.get("phase") not in ("Succeeded", "Failed"):
        reason = "Terminating"
    text = str(restarts.count)
    if restarts.count and restarts.last:
        text += f" ({age(restarts.last)} ago)"
    return f"{ready}/{total}", reason, text
