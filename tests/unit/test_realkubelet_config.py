"""What a real kubelet on a simulated node is started with (gpudra up --real-kubelet): pure functions only."""

from __future__ import annotations

from pathlib import Path

from gpudra.cluster.fleet import FleetNode, node_object
from gpudra.cluster.kubernetes.flags import KubeletPaths, kubelet_args, kubelet_config
from gpudra.cluster.kubernetes.realkubelet import (
    KERNEL_SETTINGS,
    namespaced,
    registration_labels,
    registration_taints,
)


def test_the_kubelet_registers_the_fleet_labels_it_may_set_and_the_taints() -> None:
    node = node_object(FleetNode("dgx-h100-0", "dgx-h100", 0))
    node["metadata"]["labels"]["node-role.kubernetes.io/gpu"] = ""  # kubelets may not set these
    node["spec"]["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    labels = registration_labels(node)
    assert labels["nvidia.com/gpu.present"] == "true" and labels["gpudra.dev/node-profile"] == "dgx-h100"
    assert not [key for key in labels if "kubernetes.io" in key or "k8s.io" in key]
    assert registration_taints(node) == ["nvidia.com/gpu=present:NoSchedule"]
    args = kubelet_args(
        Path("/bin/kubelet"),
        KubeletPaths(Path("/n")),
        node="dgx-h100-0",
        node_ip="192.0.2.2",
        kubeconfig=Path("/k"),
        labels=labels,
    )
    assert "--node-labels=gpudra.dev/node-profile=dgx-h100,nvidia.com/gpu.present=true" in args
    assert "--node-ip=192.0.2.2" in args and "--root-dir=/n/kubelet" in args


def test_the_kubelet_config_keeps_off_the_machine_and_takes_the_control_planes_gates() -> None:
    paths = KubeletPaths(Path("/n"))
    config = kubelet_config(
        paths,
        address="192.0.2.2",
        port=10250,
        healthz_port=10248,
        ca=Path("/ca.crt"),
        serving=(Path("/s.crt"), Path("/s.key")),
        gates="DRAPartitionableDevices=true,ResourceHealthStatus=true",
    )
    assert config["featureGates"] == {"DRAPartitionableDevices": True, "ResourceHealthStatus": True}
    assert config["containerRuntimeEndpoint"] == "unix:///n/cri.sock"
    assert (config["cgroupsPerQOS"], config["failSwapOn"], config["failCgroupV1"]) == (False, False, False)
    assert config["enforceNodeAllocatable"] == [] and config["evictionHard"] == {}
    assert str(config["podLogsDir"]).startswith("/n/kubelet/")
    assert config["authorization"] == {"mode": "Webhook"}


def test_the_kubelet_writes_only_private_copies_of_kernel_settings() -> None:
    argv = namespaced(["/bin/kubelet", "--v=3"], Path("/n/kubelet"), Path("/n/sysctl"))
    assert argv[1:5] == ["--mount", "--propagation", "private", "--"]
    script = argv[argv.index("-c") + 1]
    assert "mount -o remount,bind,ro /proc/sys" in script
    for setting in KERNEL_SETTINGS:
        assert f"/n/sysctl/{setting.replace('/', '.')} /proc/sys/{setting}" in script
    assert "mount --bind /n/kubelet /var/lib/kubelet" in script
    assert argv[-2:] == ["/bin/kubelet", "--v=3"]
