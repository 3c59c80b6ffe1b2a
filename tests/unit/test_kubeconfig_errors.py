"""A kubeconfig that is not one, or whose TLS files cannot be used, stops a gpudra command with what is wrong with it,
not a traceback: `gpudra status --kubeconfig` of a file holding a word used to end in ``AttributeError: 'str' object
has no attribute 'get'``."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudra.errors import ConfigurationError
from gpudra.kube.kubeconfig import Credentials, read_credentials
from gpudra.kube.session import ssl_context

CONTEXT = "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("garbage", "not a kubeconfig (a YAML mapping of clusters, users and contexts)"),
        ("- a list", "not a kubeconfig (a YAML mapping of clusters, users and contexts)"),
        ("current-context: x\ncontexts: [{name: x, context: nope}]", "context 'x' is not a mapping"),
        ("current-context: x\ncontexts: [word, {name: y}]", "no context named 'x'"),
        (
            CONTEXT
            + 'clusters: [{name: c, cluster: {server: "https://h", certificate-authority-data: "!!"}}]\n'
            "users: [{name: u, user: {token: t}}]",
            "certificate-authority-data is not base64",
        ),
        (
            CONTEXT + 'clusters: [{name: c, cluster: {server: "https://h"}}]\n'
            "users: [{name: u, user: {tokenFile: /nonexistent/token}}]",
            "user 'u': cannot read its tokenFile: [Errno 2] No such file or directory: '/nonexistent/token'",
        ),
    ],
    ids=[
        "a-word",
        "a-list",
        "a-context-not-a-mapping",
        "entries-not-mappings",
        "bad-base64",
        "no-token-file",
    ],
)
def test_a_broken_kubeconfig_is_refused_with_what_is_wrong(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    with pytest.raises(ConfigurationError) as caught:
        read_credentials(path)
    assert str(caught.value).startswith(f"{path}: {said}"), caught.value


def test_a_kubeconfig_that_is_not_text_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigurationError, match=r"cannot read kubeconfig .*: 'utf-8' codec can't decode"):
        read_credentials(path)


@pytest.mark.parametrize(
    ("credentials", "said"),
    [
        (
            Credentials(server="https://h", ca_path=Path("/nonexistent/ca.crt")),
            "the cluster's certificate authority (/nonexistent/ca.crt) cannot be used: No such file or directory",
        ),
        (
            Credentials(server="https://h", ca_data=b"not a certificate"),
            "the cluster's certificate authority (certificate-authority-data) cannot be used: ",
        ),
        (
            Credentials(server="https://h", certificate_path=Path("/nonexistent/c.crt")),
            "the client certificate (/nonexistent/c.crt) or its key cannot be used: No such file or directory",
        ),
        (
            Credentials(
                server="https://h", certificate_data=b"not a certificate", private_key_data=b"nor a key"
            ),
            "the client certificate (client-certificate-data) or its key cannot be used: ",
        ),
    ],
    ids=["no-ca-file", "ca-data-not-pem", "no-certificate-file", "certificate-data-not-pem"],
)
def test_tls_files_that_cannot_be_used_are_named(credentials: Credentials, said: str) -> None:
    """`gpudra status` with a kubeconfig whose certificate-authority file was gone ended in FileNotFoundError
    from ssl, naming no file."""
    with pytest.raises(ConfigurationError) as caught:
        ssl_context(credentials)
    assert str(caught.value).startswith(said), caught.value
