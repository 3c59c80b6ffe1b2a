"""What a container of the embedded cluster would see: its merged CDI edits, nvidia-smi -L as the simulated NVML
answers it for its device nodes, which CDI devices each container gets, and the log options of the node endpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request

from gpudra.agent.kubeletplugin import PreparedDevice
from gpudra.agent.prepareplan import mig_cap_minors
from gpudra.cluster.apiserver.podlogs import log_container
from gpudra.cluster.apiserver.status import APIStatusError
from gpudra.cluster.kubelet.containerview import (
    container_log,
    container_view,
    nvidia_smi_list,
    runs_nvidia_smi,
)
from gpudra.cluster.kubelet.kubeletserver import _select
from gpudra.cluster.kubelet.standin import container_devices
from gpudra.hardware.gpus.inventory import NodeInventory
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.hardware.simulated.fake_nvml import FakeNvml


def _inventory(profile: str) -> NodeInventory:
    return NvmlBackend("n", nvml=FakeNvml.from_profile(profile, node_name="n")).read_inventory()


def test_cdi_edits_apply_spec_wide_once_then_each_named_device(tmp_path: Path) -> None:
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "k8s.compute-domain.nvidia.com/claim",
        "containerEdits": {"env": ["A=spec"], "deviceNodes": [{"path": "/dev/nvidiactl"}]},
        "devices": [
            {"name": "u1-daemon-0", "containerEdits": {"env": ["CLIQUE_ID=r.1", "A=device"]}},
            {
                "name": "u1-other",
                "containerEdits": {"env": ["B=not-mine"], "deviceNodes": [{"path": "/dev/x"}]},
            },
            {"name": "u1-mps", "containerEdits": {"mounts": [{"hostPath": "/h", "containerPath": "/c"}]}},
        ],
    }
    (tmp_path / "k8s.compute-domain.nvidia.com-claim_u1.json").write_text(json.dumps(spec))
    (tmp_path / "broken.json").write_text("{")
    kind = "k8s.compute-domain.nvidia.com/claim"
    view = container_view(
        tmp_path, [f"{kind}=u1-daemon-0", f"{kind}=u1-mps", "k8s.gpu.nvidia.com/claim=u1-daemon-0"]
    )
    assert view.env == {"A": "device", "CLIQUE_ID": "r.1"}
    assert view.device_nodes == ["/dev/nvidiactl"] and view.mounts == {"/c": "/h"}
    assert view.cdi_devices == [f"{kind}=u1-daemon-0", f"{kind}=u1-mps"]  # the unknown id gives nothing


def test_nvidia_smi_lists_the_gpus_of_the_device_nodes_renumbered_from_zero() -> None:
    inventory = _inventory("dgx-h100")
    third = inventory.gpus[3]
    assert nvidia_smi_list(inventory, ["/dev/nvidiactl", f"/dev/nvidia{third.minor}"]) == [
        f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {third.uuid})"
    ]
    assert nvidia_smi_list(inventory, ["/dev/nvidiactl"]) == ["No devices were found"]


def test_nvidia_smi_lists_only_the_mig_devices_whose_capabilities_the_container_has() -> None:
    inventory = _inventory("dgx-a100")
    gpu = inventory.gpus[1]
    small = [m for m in gpu.mig_devices if m.profile == "1g.5gb"][1]
    big = next(m for m in gpu.mig_devices if m.profile == "3g.20gb")
    caps = [
        f"/dev/nvidia-caps/nvidia-cap{c}"
        for m in (small, big)
        for c in mig_cap_minors(gpu.minor, m.gi_id, m.ci_id)
    ]
    lines = nvidia_smi_list(inventory, [f"/dev/nvidia{gpu.minor}", *caps])
    order = [m for m in gpu.mig_devices if m in (small, big)]  # in NVML's order
    assert lines == [
        f"GPU 0: NVIDIA A100-SXM4-40GB (UUID: {gpu.uuid})",
        *(f"  MIG {m.profile:<11} Device {i:>2}: (UUID: {m.uuid})" for i, m in enumerate(order)),
    ]
    assert "  MIG 1g.5gb      Device  " in "\n".join(lines) and "  MIG 3g.20gb     Device  " in "\n".join(
        lines
    )
    # the parent alone, without capabilities: the GPU is listed, none of its MIG devices
    assert nvidia_smi_list(inventory, [f"/dev/nvidia{gpu.minor}"]) == [lines[0]]
    # one capability of a pair is not enough
    assert len(nvidia_smi_list(inventory, [f"/dev/nvidia{gpu.minor}", caps[0]])) == 1


@pytest.mark.parametrize(
    ("container", "runs"),
    [
        ({"command": ["bash", "-c"], "args": ["nvidia-smi -L; sleep 9999"]}, True),
        ({"command": ["nvidia-smi"]}, True),
        ({"command": ["/usr/bin/nvidia-smi", "-L"]}, True),
        ({"command": ["sh", "-c", "echo nvidia-smi-like"]}, False),
        ({"args": ["sleep", "1"]}, False),
        ({}, False),
    ],
)
def test_which_containers_run_nvidia_smi(container: dict[str, Any], runs: bool) -> None:
    assert runs_nvidia_smi(container) is runs


def test_a_container_log_names_what_it_is_given_and_the_command_that_did_not_run(tmp_path: Path) -> None:
    view = container_view(tmp_path, [])
    view.env["CUDA_MPS_PIPE_DIRECTORY"] = "/tmp/nvidia-mps"
    lines = container_log(
        {"name": "c", "command": ["bash", "-c"], "args": ["trap 'exit 0' TERM"]}, view, None
    )
    assert lines == [
        '[gpudra] no container runs on a simulated node; "c" gets CDI devices none',
        "[gpudra] env: CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
        "[gpudra] not run: bash -c 'trap '\\''exit 0'\\'' TERM'",
    ]


def test_each_container_gets_the_devices_of_the_claims_and_requests_it_names() -> None:
    pod = {
        "spec": {
            "resourceClaims": [
                {"name": "shared", "resourceClaimName": "c1"},
                {"name": "own", "resourceClaimName": "c2"},
            ],
            "initContainers": [{"name": "init"}],
            "containers": [
                {"name": "all", "resources": {"claims": [{"name": "shared"}, {"name": "own"}]}},
                {"name": "ts", "resources": {"claims": [{"name": "shared", "request": "ts-gpu"}]}},
                {"name": "sub", "resources": {"claims": [{"name": "shared", "request": "mps-gpu/h100"}]}},
            ],
        }
    }
    prepared = {
        "c1": [
            PreparedDevice("n", "gpu-0", ("ts-gpu",), ("v/claim=1-gpu-0",)),
            PreparedDevice("n", "gpu-1", ("mps-gpu",), ("v/claim=1-gpu-1",)),
        ],
        "c2": [PreparedDevice("n", "gpu-2", (), ("v/claim=2-gpu-2", "v/claim=1-gpu-0"))],
    }
    assert container_devices(pod, prepared) == {
        "init": [],
        "all": ["v/claim=1-gpu-0", "v/claim=1-gpu-1", "v/claim=2-gpu-2"],
        "ts": ["v/claim=1-gpu-0"],
        "sub": ["v/claim=1-gpu-1"],
    }


@pytest.mark.parametrize(
    ("query", "body"),
    [
        ("", b"a\nb\nc\n"),
        ("tailLines=2", b"b\nc\n"),
        ("tailLines=0", b""),
        ("limitBytes=3", b"a\nb"),
        ("timestamps=true&tailLines=1", b"2000-01-02T03:04:05.000000000Z c\n"),
        ("sinceSeconds=1", b""),  # every line was written at the start, long ago
    ],
)
def test_the_node_endpoint_applies_the_log_options(query: str, body: bytes) -> None:
    request = make_mocked_request("GET", f"/containerLogs/ns/p/c?{query}")
    assert _select(["a", "b", "c"], request, "2000-01-02T03:04:05Z") == body


def test_the_log_container_is_checked_as_kube_apiserver_checks_it() -> None:
    pod: dict[str, Any] = {
        "metadata": {"name": "p"},
        "spec": {"initContainers": [{"name": "i"}], "containers": [{"name": "a"}]},
    }
    assert log_container(pod, "") == "a" and log_container(pod, "i") == "i"
    with pytest.raises(APIStatusError, match="container b is not valid for pod p"):
        log_container(pod, "b")
    pod["spec"]["containers"].append({"name": "b"})
    with pytest.raises(
        APIStatusError, match=r"a container name must be specified for pod p, choose one of: \[i a b\]"
    ):
        log_container(pod, "")
