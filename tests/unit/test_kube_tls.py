"""The client's TLS settings from a pod's in-cluster credentials need no writable filesystem: the agent's container
runs with a read-only root filesystem and no /tmp (the chart's securityContext), and a temporary directory there
crashed every agent on a real node."""

from __future__ import annotations

import ssl
import tempfile
from pathlib import Path

import pytest

from gpudra.kube.kubeconfig import in_cluster_credentials
from gpudra.kube.session import ssl_context

SYSTEM_CAS = Path("/etc/ssl/certs/ca-certificates.crt")


@pytest.mark.skipif(not SYSTEM_CAS.is_file(), reason="no system CA bundle to stand in for the cluster CA")
def test_in_cluster_credentials_need_no_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("a-token\n")
    (account / "ca.crt").write_bytes(SYSTEM_CAS.read_bytes())
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    credentials = in_cluster_credentials(env, account)
    assert credentials is not None
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-directory"))  # as on a read-only root
    context = ssl_context(credentials)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
