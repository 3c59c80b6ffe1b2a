"""The pure parts of a real node (gpudra up --real-nodes): its addresses and CNI network, its cgroups, containerd's
configuration, the simulated GPUs' device nodes, and the settings handed to the chart."""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path

import pytest

from gpudra.cluster.realnode.cgroups import NodeCgroup, cgroup_mounts
from gpudra.cluster.realnode.containerd import containerd_config
from gpudra.cluster.realnode.devices import create_device_nodes, simulated_device_paths
from gpudra.cluster.realnode.install import chart_values, settings_env
from gpudra.cluster.realnode.network import MAX_NODES, NodeNetwork, cni_config, free_base
from gpudra.cluster.realnode.runtime import NodeImages, NodeRuntime, find_images, find_runtime
from gpudra.cluster.realnode.sandbox import NodeDirs, namespace_script
from gpudra.config import AgentSettings, ControllerSettings
from gpudra.errors import ConfigurationError

ROUTES = """default via 192.0.2.1 dev eth0
192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2
10.200.255.0/30 dev gpd200n0 proto kernel scope link src 10.200.255.1
10.200.0.0/24 via 10.200.255.2 dev gpd200n0
local 127.0.0.1 dev lo table local proto kernel scope host src 127.0.0.1
    inet 10.202.7.1/16 brd 10.202.255.255 scope global docker0
"""
IMAGES = NodeImages(
    sandbox="localhost/gpudra-pause:1",
    gpudra="localhost/gpudra:dev",
    workload="localhost/gpudra-workload:latest",
    archives={},
)


def test_a_cluster_takes_a_slash_16_no_route_or_address_of_the_machine_overlaps() -> None:
    assert free_base(ROUTES) == 201  # 10.200 is another cluster's, the default route overlaps nothing
    assert free_base(ROUTES, taken={201}) == 203  # 10.202 is an address of the machine
    with pytest.raises(ConfigurationError, match=r"free 10\.x\.0\.0/16"):
        free_base("10.0.0.0/8 dev eth1")


def test_each_node_has_its_link_its_ip_and_its_pods_subnet() -> None:
    node = NodeNetwork(201, 3)
    assert (node.host_address, node.node_address, node.pod_subnet) == (
        "10.201.255.13", "10.201.255.14", "10.201.3.0/24"
    )  # fmt: skip
    assert len(NodeNetwork(254, MAX_NODES - 1).host_link) <= 15  # a Linux interface name
    with pytest.raises(ConfigurationError, match="at most 63 real nodes"):
        NodeNetwork(201, MAX_NODES)
    (bridge, portmap) = cni_config(node, ipam_dir="/x")["plugins"]
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.201.3.0/24"}]] and bridge["isGateway"]
    assert bridge["ipMasq"] is False  # nothing of the machine's firewall changes
    assert portmap["type"] == "portmap"


MOUNTINFO_V1 = """31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
36 31 0:33 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
"""
MOUNTINFO_V2 = "30 23 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def test_the_nodes_cgroup_is_found_in_every_hierarchy() -> None:
    v1 = cgroup_mounts(MOUNTINFO_V1)
    assert v1["cpu"] == v1["cpuacct"] == Path("/sys/fs/cgroup/cpu,cpuacct")
    assert v1["pids"] == Path("/sys/fs/cgroup/pids") and "name=systemd" in v1
    node = NodeCgroup("c1", "n1", v1)
    assert not node.unified and node.path == "/gpudra/c1/n1"
    assert node.listing == Path("/sys/fs/cgroup/pids/gpudra/c1/n1")
    assert node.system_procs == Path("/sys/fs/cgroup/pids/gpudra/c1/n1/system/cgroup.procs")
    v2 = NodeCgroup("c1", "n1", cgroup_mounts(MOUNTINFO_V2))
    assert v2.unified and v2.listing == Path("/sys/fs/cgroup/gpudra/c1/n1")


def test_containerd_reads_the_nodes_cdi_directory_and_runs_pods_on_gpudras_sandbox(tmp_path: Path) -> None:
    runtime = NodeRuntime(
        bin=tmp_path / "bin", cni=tmp_path / "cni", runc=Path("/usr/sbin/runc"), images=IMAGES
    )
    config = tomllib.loads(containerd_config(NodeDirs(tmp_path), runtime, IMAGES))
    assert config["version"] == 3 and config["state"] == "/run/containerd"
    images = config["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == "localhost/gpudra-pause:1"
    cri = config["plugins"]["io.containerd.cri.v1.runtime"]
    assert cri["cdi_spec_dirs"] == ["/var/run/cdi"]  # the node's own, never the machine's /etc/cdi
    assert cri["restrict_oom_score_adj"] is True
    assert cri["cni"]["bin_dirs"] == [str(tmp_path / "cni")]
    assert cri["containerd"]["runtimes"]["runc"]["options"]["BinaryName"] == "/usr/sbin/runc"


def test_the_namespace_script_binds_the_standard_paths_and_keeps_the_machines_kernel_settings(
    tmp_path: Path,
) -> None:
    script = namespace_script(NodeDirs(tmp_path), "dgx-h100-0")
    lines = script.splitlines()
    assert lines.index("mount -t tmpfs -o mode=755 tmpfs /run") < lines.index(
        f"mount --bind {tmp_path / 'cdi'} /run/cdi"
    )
    assert f"mount --bind {tmp_path / 'kubelet'} /var/lib/kubelet" in lines
    assert "mount -o remount,bind,ro /proc/sys" in lines
    assert (
        f"mount --bind {tmp_path / 'sysctl' / 'vm.overcommit_memory'} /proc/sys/vm/overcommit_memory" in lines
    )
    assert lines[-1] == "exec sleep infinity" and "hostname dgx-h100-0" in lines


def test_simulated_gpus_have_every_device_node_their_cdi_specs_may_name() -> None:
    paths = simulated_device_paths([1, 0])
    assert paths[:3] == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    assert "/dev/nvidia0" in paths and "/dev/nvidia1" in paths
    assert "/dev/nvidia-caps/nvidia-cap21" in paths and "/dev/nvidia-caps/nvidia-cap22" in paths
    assert len(paths) == len(set(paths)) == 3 + 2 * (1 + 15 * 9)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")
def test_device_nodes_are_null_devices_open_to_all(tmp_path: Path) -> None:
    assert create_device_nodes(tmp_path, ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap3"]) == 2
    node = (tmp_path / "dev" / "nvidia-caps" / "nvidia-cap3").stat()
    assert stat.S_ISCHR(node.st_mode) and stat.S_IMODE(node.st_mode) == 0o666
    assert (os.major(node.st_rdev), os.minor(node.st_rdev)) == (1, 3)
    assert create_device_nodes(tmp_path, ["/dev/nvidia0"]) == 0  # kept


def test_the_chart_gets_the_settings_that_differ_from_the_defaults() -> None:
    agent = AgentSettings(
        node_name="n", hardware_poll_seconds=0.1, health_ignored_xids=[13], mig_policy="Dynamic"
    )
    env = settings_env(agent, exclude={"node_name"})
    assert env == {
        "GPUDRA_HARDWARE_POLL_SECONDS": "0.1",
        "GPUDRA_HEALTH_IGNORED_XIDS": "[13]",
        "GPUDRA_MIG_POLICY": "Dynamic",
    }
    assert settings_env(ControllerSettings()) == {}
    values = chart_values(IMAGES, api_host="192.0.2.2", api_port=6443, controller_env={}, agent_env=env)
    assert values["image"] == {"repository": "localhost/gpudra", "tag": "dev", "pullPolicy": "Never"}
    assert values["kubernetesServicePort"] == "6443" and values["agent"]["env"] == env
    assert values["agent"]["nodeSelector"] == {"gpudra.dev/real-node": "true"}


def test_a_missing_runtime_or_image_names_the_command_that_builds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUDRA_CACHE", str(tmp_path))
    with pytest.raises(ConfigurationError, match=r"run `make node` first; missing .*containerd"):
        find_runtime()
    with pytest.raises(ConfigurationError, match=r"run `make images` first"):
        find_images()
