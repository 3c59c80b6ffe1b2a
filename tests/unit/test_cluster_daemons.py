"""The embedded cluster's stand-ins for IMEX daemon pods: the DaemonSet controller's node matching and pods,
and the ``gpudra imex-daemon`` settings from the pod env."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.cluster.controlplane.daemonsets import daemon_pod, matching_nodes, pod_node
from gpudra.cluster.controlplane.manager import ControlPlane
from gpudra.config import ImexDaemonSettings, load_settings
from gpudra.errors import ConfigurationError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import NODES
from gpudra.kube.transport import Call, Reply

DAEMON_SET: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {"name": "computedomain-daemon-u1", "namespace": "gpudra", "uid": "ds-uid"},
    "spec": {
        "template": {
            "metadata": {"labels": {"app.kubernetes.io/component": "daemon"}},
            "spec": {"nodeSelector": {"computedomain.gpudra.dev/u1": "true"}, "containers": [{"name": "d"}]},
        }
    },
}


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def test_daemonset_runs_on_labelled_nodes_only() -> None:
    nodes = [
        node("b", **{"computedomain.gpudra.dev/u1": "true"}),
        node("a", **{"computedomain.gpudra.dev/u1": "true", "x": "y"}),
        node("c", **{"computedomain.gpudra.dev/u2": "true"}),
        node("d"),
    ]
    assert matching_nodes(DAEMON_SET, nodes) == ["a", "b"]


def test_daemon_pod_is_owned_and_pinned_to_its_node() -> None:
    pod = daemon_pod(DAEMON_SET, "tray-3")
    assert pod["spec"]["nodeSelector"] == {
        "computedomain.gpudra.dev/u1": "true",
        "kubernetes.io/hostname": "tray-3",
    }
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "ds-uid"
    assert pod["metadata"]["labels"] == {"app.kubernetes.io/component": "daemon"}
    assert pod_node(pod) == "tray-3" and pod_node({**pod, "spec": {"nodeName": "tray-4"}}) == "tray-4"
    assert "kubernetes.io/hostname" not in DAEMON_SET["spec"]["template"]["spec"]["nodeSelector"]


def test_imex_daemon_settings_come_from_the_pod_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "COMPUTE_DOMAIN_UUID": "u1",
        "CLIQUE_ID": "r.1",
        "NODE_NAME": "tray-3",
        "POD_NAMESPACE": "gpudra",
        "POD_IP": "10.0.0.3",
    }.items():
        monkeypatch.setenv(name, value)
    settings = load_settings(ImexDaemonSettings)
    assert (
        settings.domain_uid,
        settings.clique_id,
        settings.node_name,
        settings.namespace,
        settings.ip_address,
    ) == (
        "u1",
        "r.1",
        "tray-3",
        "gpudra",
        "10.0.0.3",
    )
    monkeypatch.delenv("CLIQUE_ID")
    with pytest.raises(ConfigurationError, match="CLIQUE_ID: Field required"):
        load_settings(ImexDaemonSettings)


class _NoServer:
    async def request(self, call: Call) -> Reply:
        raise AssertionError("nothing is asked of the server before the control plane runs")

    async def close(self) -> None:
        return None


def test_the_stand_in_control_plane_keeps_one_cache_of_the_nodes() -> None:
    """The DaemonSet controller reads the scheduler's Node cache: one list, one watch and one decoded copy of every
    Node for the whole stand-in control plane (at 5,000 nodes a second copy was about 50 MiB)."""
    plane = ControlPlane(KubeClient(_NoServer()))
    runs = [*plane.state.informers, *plane.workloads.informers, *plane.daemonsets.informers]
    assert [informer.resource for informer in runs].count(NODES) == 1
    assert plane.daemonsets.nodes is plane.state.nodes
