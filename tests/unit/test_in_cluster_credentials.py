"""A pod's own credentials: the API server where KUBERNETES_SERVICE_HOST and _PORT say (the kubelet's, or a chart's
on a cluster without a service proxy), never kopf's hard-coded https://kubernetes.default.svc, which needs cluster
DNS; the token read afresh at each login, since the kubelet rotates it."""

from __future__ import annotations

from pathlib import Path

from gpudra.kube.kubeconfig import in_cluster_credentials


def service_account(tmp_path: Path, token: str = "t0") -> Path:
    (tmp_path / "token").write_text(token + "\n")
    (tmp_path / "ca.crt").write_text("PEM")
    (tmp_path / "namespace").write_text("gpudra")
    return tmp_path


def test_the_service_host_and_port_name_the_server(tmp_path: Path) -> None:
    directory = service_account(tmp_path)
    found = in_cluster_credentials(
        {"KUBERNETES_SERVICE_HOST": "192.0.2.2", "KUBERNETES_SERVICE_PORT": "6443"}, directory
    )
    assert found is not None
    assert (found.server, found.token, found.namespace, found.ca_path) == (
        "https://192.0.2.2:6443", "t0", "gpudra", directory / "ca.crt"
    )  # fmt: skip
    ipv6 = in_cluster_credentials(
        {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}, directory
    )
    assert ipv6 is not None and ipv6.server == "https://[fd00::1]:443"


def test_a_rotated_token_is_read_at_the_next_login(tmp_path: Path) -> None:
    directory = service_account(tmp_path)
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    first = in_cluster_credentials(env, directory)
    (directory / "token").write_text("t1")
    second = in_cluster_credentials(env, directory)
    assert first is not None and second is not None
    assert (first.token, second.token) == ("t0", "t1")


def test_outside_a_pod_there_are_none(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert in_cluster_credentials(env, tmp_path) is None  # no token
    assert in_cluster_credentials({}, service_account(tmp_path)) is None  # no service address
