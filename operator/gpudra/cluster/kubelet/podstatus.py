"""A pod's status as a kubelet (Kubernetes 1.37) writes it, for the stand-in kubelet: pure functions, no I/O.

Three moments are modelled: the pod cannot start yet (its claims failed to prepare: Pending, every container waiting
with reason ContainerCreating, or PodInitializing when it has init containers, the pod not ready), and the pod runs
(Running, regular init containers terminated with Completed, sidecars and containers running, ready and started, the
five kubelet conditions True), and its containers ended (Succeeded, or Failed when one exited non-zero; each
container terminated with Completed or Error, the pod no longer ready). Images are resolved as a container runtime
reports them (``ubuntu:22.04`` -> ``docker.io/library/ubuntu:22.04``); image and container ids are simulated
digests."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from .containerlife import Lifetime
from .resourcehealth import with_resources_status

KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
"""The conditions a kubelet writes, in the order it writes them; others on the pod are kept."""


def resolved_image(image: str) -> str:
    """The image reference as a container runtime reports it: registry, ``library/`` and ``:latest`` filled in."""
    name, at, digest = image.partition("@")
    first, slash, _ = name.partition("/")
    if not slash:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    if at:
        return f"{name}@{digest}"
    last = name.rsplit("/", 1)[-1]
    return name if ":" in last else f"{name}:latest"


def image_id(image: str) -> str:
    """``<repository>@sha256:<digest>`` (the digest is simulated: derived from the reference)."""
    resolved = resolved_image(image)
    if "@" in resolved:
        return resolved
    repository = resolved.rsplit(":", 1)[0]
    return f"{repository}@sha256:{hashlib.sha256(resolved.encode()).hexdigest()}"


def container_id(pod_uid: str, container: str) -> str:
    return "containerd://" + hashlib.sha256(f"{pod_uid}/{container}".encode()).hexdigest()


def pod_ip(node_ip: str, index: int) -> str:
    """The ``index``-th pod address of a node: a /24 of 100.64.0.0/10 per node, derived from its IP."""
    digest = hashlib.sha256(node_ip.encode()).digest()
    return f"100.{64 + digest[0] % 64}.{digest[1]}.{2 + index % 253}"


def _is_sidecar(container: dict[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


def _names(containers: list[dict[str, Any]]) -> str:
    return "[" + " ".join(str(c.get("name", "")) for c in containers) + "]"


class PodStatusWriter:
    """Builds the status of one pod; ``now`` is the RFC 3339 time of this write."""

    def __init__(self, pod: dict[str, Any], *, node_ip: str, now: str) -> None:
        self.pod = pod
        self.node_ip = node_ip
        self.now = now
        spec = pod.get("spec") or {}
        self.containers: list[dict[str, Any]] = list(spec.get("containers") or [])
        self.init_containers: list[dict[str, Any]] = list(spec.get("initContainers") or [])
        self.old: dict[str, Any] = pod.get("status") or {}
        self.generation = int((pod.get("metadata") or {}).get("generation") or 0)

    def _condition(self, kind: str, status: str, reason: str = "", message: str = "") -> dict[str, Any]:
        old = next((c for c in self.old.get("conditions") or [] if c.get("type") == kind), None)
        since = old.get("lastTransitionTime") if old and old.get("status") == status else None
        condition: dict[str, Any] = {"type": kind, "status": status, "lastProbeTime": None}
        if self.generation:
            condition["observedGeneration"] = self.generation
        condition["lastTransitionTime"] = since or self.now
        if reason:
            condition["reason"] = reason
        if message:
            condition["message"] = message
        return condition

    def _conditions(self, owned: list[dict[str, Any]]) -> list[dict[str, Any]]:
        kept = [c for c in self.old.get("conditions") or [] if c.get("type") not in KUBELET_CONDITIONS]
        return [*kept, *owned, self._condition("PodScheduled", "True")]

    def _base(self, phase: str) -> dict[str, Any]:
        status: dict[str, Any] = {"phase": phase}
        if self.generation:
            status["observedGeneration"] = self.generation
        status["hostIP"] = self.node_ip
        status["hostIPs"] = [{"ip": self.node_ip}]
        status["startTime"] = self.old.get("startTime") or self.now
        if self.old.get("qosClass"):
            status["qosClass"] = self.old["qosClass"]
        return status

    def _container(self, container: dict[str, Any], state: dict[str, Any], *, ready: bool) -> dict[str, Any]:
        name = str(container.get("name", ""))
        image = str(container.get("image", ""))
        running = "waiting" not in state
        status: dict[str, Any] = {"name": name, "state": state, "lastState": {}, "ready": ready}
        status["restartCount"] = 0
        status["image"] = resolved_image(image) if running else image
        status["imageID"] = image_id(image) if running else ""
        if running:
            status["containerID"] = container_id(str(self.pod["metadata"].get("uid", "")), name)
        status["started"] = running and "terminated" not in state
        return status

    def waiting(self) -> dict[str, Any]:
        """The pod cannot start its containers (e.g. its claims failed to prepare): Pending, nothing ready."""
        reason = "PodInitializing" if self.init_containers else "ContainerCreating"
        state = {"waiting": {"reason": reason}}
        status = self._base("Pending")
        not_ready = f"containers with unready status: {_names(self.containers)}"
        owned = [
            self._condition(
                "PodReadyToStartContainers", "False", "PodSandboxNotReady", "no pod sandbox exists"
            )
        ]
        if self.init_containers:
            owned.append(
                self._condition(
                    "Initialized",
                    "False",
                    "ContainersNotInitialized",
                    f"containers with incomplete status: {_names(self.init_containers)}",
                )
            )
        else:
            owned.append(self._condition("Initialized", "True"))
        owned.append(self._condition("Ready", "False", "ContainersNotReady", not_ready))
        owned.append(self._condition("ContainersReady", "False", "ContainersNotReady", not_ready))
        status["conditions"] = self._conditions(owned)
        if self.init_containers:
            status["initContainerStatuses"] = [
                self._container(c, state, ready=False) for c in self.init_containers
            ]
        status["containerStatuses"] = [self._container(c, state, ready=False) for c in self.containers]
        return status

    def _completed(self, pod_uid: str, container: dict[str, Any]) -> dict[str, Any]:
        return {
            "terminated": {
                "containerID": container_id(pod_uid, str(container.get("name", ""))),
                "exitCode": 0,
                "reason": "Completed",
                "startedAt": self.now,
                "finishedAt": self.now,
            }
        }

    def running(self, ip: str, resources: Mapping[str, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
        """Every container started and ready; regular init containers ran to completion. ``resources``: each
        container's ``allocatedResourcesStatus`` (resourcehealth.py)."""
        status = self._base("Running")
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
        owned = [self._condition(kind, "True") for kind in KUBELET_CONDITIONS[:4]]
        status["conditions"] = self._conditions(owned)
        started = {"running": {"startedAt": self.now}}
        if self.init_containers:
            uid = str(self.pod["metadata"].get("uid", ""))
            status["initContainerStatuses"] = [
                self._container(c, started if _is_sidecar(c) else self._completed(uid, c), ready=True)
                for c in self.init_containers
            ]
        statuses = [self._container(c, started, ready=True) for c in self.containers]
        status["containerStatuses"] = with_resources_status(statuses, resources or {})
        return status

    def finished(self, ip: str, started_at: str, lifetimes: list[Lifetime]) -> dict[str, Any]:
        """Every container ended (``lifetimes``: how each did, in order; they ran from ``started_at``):
        Succeeded, or Failed when one exited non-zero, as a kubelet writes it once the sandbox is gone."""
        failed = any(life.exit_code for life in lifetimes)
        phase, reason = ("Failed", "PodFailed") if failed else ("Succeeded", "PodCompleted")
        status = self._base(phase)
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
        owned = [
            self._condition("PodReadyToStartContainers", "False"),
            self._condition(
                "Initialized", "True", "PodCompleted" if self.init_containers and not failed else ""
            ),
            self._condition("Ready", "False", reason),
            self._condition("ContainersReady", "False", reason),
        ]
        status["conditions"] = self._conditions(owned)
        uid = str(self.pod["metadata"].get("uid", ""))
        if self.init_containers:
            status["initContainerStatuses"] = [
                self._container(c, self._completed(uid, c), ready=False) for c in self.init_containers
            ]
        statuses = []
        for container, life in zip(self.containers, lifetimes, strict=True):
            ended = {
                "containerID": container_id(uid, str(container.get("name", ""))),
                "exitCode": life.exit_code,
                "reason": "Error" if life.exit_code else "Completed",
                "startedAt": started_at,
                "finishedAt": self.now,
            }
            statuses.append(self._container(container, {"terminated": ended}, ready=False))
        status["containerStatuses"] = statuses
        return status
