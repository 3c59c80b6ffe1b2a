"""The pure parts of the real-control-plane launcher: feature gates and controllers read from a binary's --help,
what of the base is installed, kubeconfigs written and read back, and the default version shared with the build."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudra.cluster.kubernetes.binaries import DEFAULT_ETCD_VERSION, DEFAULT_KUBERNETES_VERSION, find_binaries
from gpudra.cluster.kubernetes.bootstrap import install_objects
from gpudra.cluster.kubernetes.controlplane import known_controllers, runtime_config_flag
from gpudra.cluster.kubernetes.flags import (
    Layout,
    controller_manager_args,
    gate_flag,
    known_gates,
    scheduler_args,
)
from gpudra.errors import ConfigurationError
from gpudra.kube.kubeconfig import Credentials, read_credentials, write_kubeconfig

ROOT = Path(__file__).resolve().parents[2]
HELP_1_37 = """
      --feature-gates colonSeparatedMultimapStringString   Comma-separated list of component:key=value pairs
                                                           kube:APIResponseCompression=true|false (BETA - default=true)
                                                           kube:DRAConsumableCapacity=true|false (BETA - default=true)
                                                           kube:DRAListTypeAttributes=true|false (ALPHA - default=false)
                                                           kube:DRAPartitionableDevices=true|false (BETA - default=true)
"""
HELP_1_34 = """
      --feature-gates mapStringBool   A set of key=value pairs that describe feature gates. Options are:
                                      DRAAdminAccess=true|false (BETA - default=true)
                                      DRADeviceTaints=true|false (ALPHA - default=false)
                                      DRAExtendedResource=true|false (ALPHA - default=false)
"""


@pytest.mark.parametrize(
    ("help_text", "expected"),
    [
        (HELP_1_37, "DRAPartitionableDevices=true,DRAConsumableCapacity=true"),
        (HELP_1_34, "DRAAdminAccess=true,DRADeviceTaints=true,DRAExtendedResource=true"),
    ],
)
def test_only_the_gates_a_version_lists_are_passed(help_text: str, expected: str) -> None:
    assert gate_flag(known_gates(help_text)) == expected


def test_the_product_gates_a_version_locked_on_are_left_out() -> None:
    gates = known_gates(HELP_1_37)
    assert gates["DRAListTypeAttributes"] == "ALPHA"
    assert "DRADeviceTaints" not in gate_flag(gates)  # GA in 1.37: no longer listed, not passed


def test_controllers_are_read_from_the_list_in_help() -> None:
    text = (
        "  --controllers strings  A list of controllers to enable.\n"
        "      All controllers: cronjob-controller, daemonset-controller, resourceclaim-controller\n"
        "      Disabled-by-default controllers: bootstrap-signer-controller (default [*])"
    )
    assert known_controllers(text) == {
        "cronjob-controller",
        "daemonset-controller",
        "resourceclaim-controller",
    }


def test_the_install_leaves_out_the_workloads_gpudra_up_runs_itself() -> None:
    rendered = """
kind: Namespace
metadata: {name: gpudra}
---
kind: Deployment
metadata: {name: gpudra-controller}
---
kind: DaemonSet
metadata: {name: gpudra-agent}
---
kind: ClusterRole
metadata: {name: gpudra-agent}
"""
    assert [o["kind"] for o in install_objects(rendered)] == ["Namespace", "ClusterRole"]


def test_a_kubeconfig_is_read_back_as_written(tmp_path: Path) -> None:
    written = Credentials(
        server="https://127.0.0.1:6443",
        ca_path=tmp_path / "ca.crt",
        token="secret-token",
        certificate_path=tmp_path / "client.crt",
        private_key_path=tmp_path / "client.key",
        namespace="gpudra",
    )
    path = write_kubeconfig(tmp_path / "kc" / "config", written)
    assert path.stat().st_mode & 0o077 == 0, "a kubeconfig with a token is readable by its owner only"
    assert read_credentials(path) == written


def test_a_kubeconfig_without_a_current_context_says_so(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    with pytest.raises(ConfigurationError, match="no current-context"):
        read_credentials(path)


def test_missing_binaries_name_make_kubernetes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUDRA_CACHE", str(tmp_path))
    with pytest.raises(ConfigurationError, match=r"run `make kubernetes` \(K8S_VERSION=1\.99\.0\) first"):
        find_binaries("1.99.0")


def test_the_launcher_and_the_build_agree_on_the_default_versions() -> None:
    build = (ROOT / "hack" / "kubernetes" / "build.sh").read_text()
    assert f'K8S_VERSION="${{K8S_VERSION:-{DEFAULT_KUBERNETES_VERSION}}}"' in build
    assert f'ETCD_VERSION="${{ETCD_VERSION:-{DEFAULT_ETCD_VERSION}}}"' in build


def test_a_raised_client_rate_reaches_the_scheduler_and_the_controller_manager_and_none_keeps_theirs() -> (
    None
):
    layout = Layout(Path("/c"))
    binary = Path("/bin/x")
    raised = [
        scheduler_args(binary, layout, port=1, gates="", qps=200),
        controller_manager_args(binary, layout, port=2, gates="", controllers=("job-controller",), qps=200),
    ]
    for argv in raised:
        assert argv[-2:] == ["--kube-api-qps=200", "--kube-api-burst=400"]
    default = scheduler_args(binary, layout, port=1, gates="") + controller_manager_args(
        binary, layout, port=2, gates="", controllers=("job-controller",)
    )
    assert not [a for a in default if a.startswith("--kube-api-")]


@pytest.mark.parametrize(
    ("minor", "gates", "expected"),
    [
        (37, (), ""),
        (37, ("GenericWorkload", "DRAWorkloadResourceClaims"), "scheduling.k8s.io/v1beta1=true"),
        (36, ("GenericWorkload",), "resource.k8s.io/v1beta2=true,scheduling.k8s.io/v1alpha2=true"),
        (35, ("GenericWorkload",), "resource.k8s.io/v1alpha3=true"),
    ],
)
def test_the_podgroup_api_is_served_where_generic_workload_is_asked_for(
    minor: int, gates: tuple[str, ...], expected: str
) -> None:
    assert runtime_config_flag(minor, gates) == expected
