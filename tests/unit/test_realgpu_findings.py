"""What the real-GPU check (hack/realgpu) concludes, over the recording of a real H200: MIG mode read from the
recording, the published devices against it, the CDI spec's device nodes, and the health stream."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gpudra.realgpu.findings import (
    compare_slices,
    gpus_with_mig_on,
    health_findings,
    node_devices,
    spec_device_nodes,
)

H200 = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "nvml" / "h200-sxm-141gb-580.159.04.json").read_text()
)


def test_the_recorded_h200_has_mig_off() -> None:
    assert gpus_with_mig_on(H200) == []


@pytest.mark.parametrize(("enabled", "pending"), [(True, True), (False, True), (True, False)])
def test_mig_mode_on_now_or_after_the_next_reset_is_reported(enabled: bool, pending: bool) -> None:
    recording = copy.deepcopy(H200)
    gpu = recording["inventory"]["gpus"][0]
    gpu.update(mig_enabled=enabled, mig_pending=pending)

    assert gpus_with_mig_on(recording) == [
        {"index": 0, "uuid": gpu["uuid"], "mig_enabled": enabled, "mig_pending": pending}
    ]


def test_what_the_recording_says_is_published_passes() -> None:
    problems, summary = compare_slices(H200["devices"], H200)

    assert problems == []
    assert summary["by_type"] == {"gpu": 1}
    assert summary["first_gpu"]["attributes"]["productName"] == {"string": "NVIDIA H200"}


def test_a_recorded_gpu_left_out_of_the_slices_fails() -> None:
    problems, _ = compare_slices([], H200)

    uuid = H200["inventory"]["gpus"][0]["uuid"]
    assert problems == [
        "the node's slices publish no device",
        "devices of the recording not published: ['gpu-0']",
        f"GPUs of the recording with no published device: ['{uuid}']",
    ]


def test_only_the_node_and_driver_of_the_check_count() -> None:
    def slice_(node: str, driver: str, name: str) -> dict[str, Any]:
        return {"spec": {"nodeName": node, "driver": driver, "devices": [{"name": name}]}}

    slices = [
        slice_("n", "gpu.nvidia.com", "a"),
        slice_("m", "gpu.nvidia.com", "b"),
        slice_("n", "x.io", "c"),
    ]
    assert node_devices(slices, "n", "gpu.nvidia.com") == [{"name": "a"}]


def test_device_nodes_are_read_where_the_runtime_reads_them() -> None:
    spec = {
        "containerEdits": {
            "deviceNodes": [{"path": "/dev/nvidiactl", "hostPath": "/run/nvidia/driver/dev/nvidiactl"}]
        },
        "devices": [
            {"containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
            {"containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}, {"path": "/dev/nvidia1"}]}},
        ],
    }
    assert spec_device_nodes(spec) == ["/run/nvidia/driver/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1"]


def health(device: str, state: str, message: str = "") -> dict[str, str]:
    return {"device": device, "health": state, "message": message}


def test_a_stream_of_healthy_devices_passes() -> None:
    problems, summary = health_findings([[health("gpu-0", "HEALTHY")]], ["gpu-0"])

    assert problems == []
    assert summary == {"updates": 1, "last": {"HEALTHY": 1}, "unhealthy": [], "messages": []}


@pytest.mark.parametrize(
    ("updates", "problem"),
    [
        ([], "the health stream sent nothing"),
        ([[health("gpu-1", "HEALTHY")]], "published devices missing from the last health update: ['gpu-0']"),
        (
            [
                [health("gpu-0", "UNHEALTHY", "XID 79"), health("gpu-1", "HEALTHY")],
                [health("gpu-0", "HEALTHY")],
            ],
            "devices reported unhealthy: ['gpu-0']",
        ),
    ],
)
def test_a_silent_incomplete_or_unhealthy_stream_fails(
    updates: list[list[dict[str, str]]], problem: str
) -> None:
    problems, _ = health_findings(updates, ["gpu-0"])

    assert problems == [problem]
