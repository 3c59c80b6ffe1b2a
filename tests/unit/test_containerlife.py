"""Which simulated containers end, when, and with what exit code (the stand-in kubelet's rule)."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.cluster.kubelet.containerlife import Lifetime, container_lifetime, pod_lifetime


def ctr(
    command: list[str] | None = None, args: list[str] | None = None, image: str = "vllm/vllm-openai"
) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "c", "image": image}
    if command is not None:
        body["command"] = command
    if args is not None:
        body["args"] = args
    return body


@pytest.mark.parametrize(
    ("container", "expected"),
    [
        (ctr(["echo", "hi"]), Lifetime(0, 0)),
        (ctr(["/bin/true"]), Lifetime(0, 0)),
        (ctr(["false"]), Lifetime(0, 1)),
        (ctr(["sleep", "2"]), Lifetime(2, 0)),
        (ctr(["sh", "-c", "echo a; sleep 1m; exit 3"]), Lifetime(60, 3)),
        (ctr(["bash", "-c"], ["false && sleep 5 || echo recovered"]), Lifetime(0, 0)),
        (ctr(["nvidia-smi", "-L"]), Lifetime(0, 0)),
        (ctr(args=["echo", "hi"], image="busybox"), Lifetime(0, 0)),
        (ctr(args=["echo", "hi"], image="docker.io/library/ubuntu:22.04"), Lifetime(0, 0)),
    ],
)
def test_commands_known_to_end(container: dict[str, Any], expected: Lifetime) -> None:
    assert container_lifetime(container) == expected


@pytest.mark.parametrize(
    "container",
    [
        ctr(),  # the image's entrypoint
        ctr(args=["echo", "hi"]),  # args to an unknown entrypoint
        ctr(image="busybox"),  # the image's default shell
        ctr(["sleep", "infinity"]),
        ctr(["python", "train.py"]),
        ctr(["bash", "-c", "nvidia-smi -L; sleep infinity"]),
        ctr(["sh", "-c", "while true; do echo x; done"]),
        ctr(["sh", "-c", "echo $(date)"]),
        ctr(["nvidia-smi", "-l", "5"]),
    ],
)
def test_anything_else_runs_until_deleted(container: dict[str, Any]) -> None:
    assert container_lifetime(container) is None


def pod(policy: str | None, *containers: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if policy:
        spec["restartPolicy"] = policy
    return {"spec": spec}


def test_a_pod_ends_only_when_every_container_does_and_it_is_not_restarted() -> None:
    assert pod_lifetime(pod("Never", ctr(["echo"]), ctr(["sleep", "3"]))) == [Lifetime(0, 0), Lifetime(3, 0)]
    assert pod_lifetime(pod("Never", ctr(["echo"]), ctr(["sleep", "infinity"]))) is None
    assert pod_lifetime(pod(None, ctr(["echo"]))) is None  # Always: it would be restarted
    assert pod_lifetime(pod("OnFailure", ctr(["true"]))) == [Lifetime(0, 0)]
    assert pod_lifetime(pod("OnFailure", ctr(["false"]))) is None  # restarted on failure
    assert pod_lifetime(pod("Never", ctr(["false"]))) == [Lifetime(0, 1)]
