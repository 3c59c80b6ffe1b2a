"""A kubeconfig that is not one stops a gpudra command with what is wrong with it, not a traceback: `gpudra status
--kubeconfig` of a file holding a word used to end in ``AttributeError: 'str' object has no attribute 'get'``."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudra.errors import ConfigurationError
from gpudra.kube.kubeconfig import read_credentials

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
