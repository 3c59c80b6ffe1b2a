"""The stand-in kubelet's pod status and the Ready/Status/Restarts cells of `kubectl get pods`."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.cluster.apiserver.podtable import pod_cells
from gpudra.cluster.kubelet.podstatus import PodStatusWriter, resolved_image

NOW = "2026-01-02T03:04:05Z"


@pytest.mark.parametrize(
    ("image", "resolved"),
    [
        ("ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
        ("busybox", "docker.io/library/busybox:latest"),
        ("bitnami/redis", "docker.io/bitnami/redis:latest"),
        ("nvcr.io/nvidia/k8s/cuda-sample:nbody", "nvcr.io/nvidia/k8s/cuda-sample:nbody"),
        ("localhost/app", "localhost/app:latest"),
        ("registry:5000/app", "registry:5000/app:latest"),
        ("ubuntu@sha256:abc", "docker.io/library/ubuntu@sha256:abc"),
    ],
)
def test_images_are_resolved_as_a_container_runtime_reports_them(image: str, resolved: str) -> None:
    assert resolved_image(image) == resolved


def _pod(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "uid": "u1", "generation": 1, "creationTimestamp": NOW},
        "spec": {"containers": [{"name": "a", "image": "ubuntu"}, {"name": "b", "image": "ubuntu"}], **spec},
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }


def test_running_status_counts_every_container_ready_and_keeps_foreign_conditions() -> None:
    pod = _pod(
        initContainers=[
            {"name": "init", "image": "x"},
            {"name": "side", "image": "y", "restartPolicy": "Always"},
        ]
    )
    pod["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "False"}]
    status = PodStatusWriter(pod, node_ip="10.0.0.1", now=NOW).running("100.64.0.2")
    assert [c["type"] for c in status["conditions"]] == [
        "DisruptionTarget", "PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled",
    ]  # fmt: skip
    assert status["qosClass"] == "BestEffort" and status["observedGeneration"] == 1
    init, side = status["initContainerStatuses"]
    assert init["state"]["terminated"]["reason"] == "Completed" and not init["started"]
    assert side["state"]["running"]["startedAt"] == NOW and side["started"] and side["ready"]
    assert pod_cells({**pod, "status": status}, str) == ("3/3", "Running", "0")


def test_waiting_status_keeps_its_transition_times_across_writes() -> None:
    pod = _pod()
    first = PodStatusWriter(pod, node_ip="10.0.0.1", now=NOW).waiting()
    pod["status"] = first
    again = PodStatusWriter(pod, node_ip="10.0.0.1", now="2026-01-02T03:09:00Z").waiting()
    assert again["conditions"] == first["conditions"] and again["startTime"] == NOW
    ready = next(c for c in again["conditions"] if c["type"] == "Ready")
    assert ready["message"] == "containers with unready status: [a b]"
    assert pod_cells({**pod, "status": again}, str) == ("0/2", "ContainerCreating", "0")
    assert all(s["imageID"] == "" and "containerID" not in s for s in again["containerStatuses"])


def test_waiting_with_init_containers_shows_init_progress() -> None:
    pod = _pod(initContainers=[{"name": "init", "image": "x"}])
    status = PodStatusWriter(pod, node_ip="10.0.0.1", now=NOW).waiting()
    initialized = next(c for c in status["conditions"] if c["type"] == "Initialized")
    assert initialized["reason"] == "ContainersNotInitialized"
    assert status["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert pod_cells({**pod, "status": status}, str) == ("0/2", "Init:0/1", "0")


def _state(**state: Any) -> dict[str, Any]:
    return state


@pytest.mark.parametrize(
    ("status", "cells"),
    [
        ({"phase": "Pending"}, ("0/2", "Pending", "0")),
        ({"phase": "Failed", "reason": "Evicted"}, ("0/2", "Evicted", "0")),
        (
            {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [
                    {"name": "a", "ready": True, "state": _state(running={})},
                    {
                        "name": "b",
                        "ready": False,
                        "restartCount": 3,
                        "state": _state(waiting={"reason": "CrashLoopBackOff"}),
                        "lastState": {"terminated": {"exitCode": 1, "finishedAt": "LAST"}},
                    },
                ],
            },
            ("1/2", "CrashLoopBackOff", "3 (age of LAST ago)"),
        ),
        (
            {
                "phase": "Running",
                "containerStatuses": [
                    {"name": "a", "ready": True, "state": _state(running={})},
                    {"name": "b", "state": _state(terminated={"exitCode": 0, "reason": "Completed"})},
                ],
            },
            ("1/2", "NotReady", "0"),
        ),
        (
            {
                "phase": "Running",
                "containerStatuses": [
                    {"name": "a", "state": _state(terminated={"exitCode": 0, "reason": "Completed"})},
                    {"name": "b", "state": _state(terminated={"exitCode": 2})},
                ],
            },
            ("0/2", "ExitCode:2", "0"),
        ),
        (
            {
                "phase": "Pending",
                "initContainerStatuses": [
                    {"name": "init", "state": _state(waiting={"reason": "ErrImagePull"})}
                ],
            },
            ("0/2", "Init:ErrImagePull", "0"),
        ),
        (
            {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}],
            },
            ("0/2", "SchedulingGated", "0"),
        ),
    ],
)
def test_pod_cells_as_kube_apiserver_prints_them(status: dict[str, Any], cells: tuple[str, str, str]) -> None:
    pod = (
        _pod(initContainers=[{"name": "init", "image": "x"}]) if "initContainerStatuses" in status else _pod()
    )
    pod["status"] = status
    assert pod_cells(pod, lambda t: f"age of {t}") == cells


def test_a_deleted_pod_is_terminating_until_it_ends() -> None:
    pod = _pod()
    pod["metadata"]["deletionTimestamp"] = NOW
    assert pod_cells(pod, str)[1] == "Terminating"
    pod["status"] = {"phase": "Succeeded"}
    assert pod_cells(pod, str)[1] == "Succeeded"
