"""The agent's API client without kubernetes_asyncio (gpudra.kube.session): a kubelet-rotated service-account token
is used once it is read again, and a kubeconfig whose user needs a plugin still reaches its server through
kubernetes_asyncio's loader instead of going out without credentials."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest
from aiohttp import web

from gpudra.kube import session
from gpudra.kube.client import KubeClient
from gpudra.kube.kubeconfig import Credentials, read_credentials


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, list[str | None]]]:
    """An HTTP server that answers /version and records each request's Authorization header."""
    seen: list[str | None] = []

    async def version(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.json_response({"major": "1", "minor": "37"})

    app = web.Application()
    app.router.add_get("/version", version)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    # the ignore below: aiohttp's started site has a server; its type says it may not
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


async def test_a_rotated_token_is_sent_once_read_again(
    server: tuple[str, list[str | None]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = server
    token = tmp_path / "token"
    token.write_text("t0\n")
    client = KubeClient(session.SessionTransport(Credentials(server=url, token="t0", token_path=token)))
    try:
        assert await client.server_version() == (1, 37)
        token.write_text("t1\n")  # the kubelet rotated it
        monkeypatch.setattr(session, "TOKEN_REREAD_SECONDS", 0.0)
        await client.server_version()
    finally:
        await client.close()
    assert seen == ["Bearer t0", "Bearer t1"]


def kubeconfig(tmp_path: Path, url: str, user: Mapping[str, object]) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{url}"}}}}]
users: [{{name: u, user: {user}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""
    )
    return path


async def test_a_kubeconfig_user_with_an_exec_plugin_gets_the_plugins_token(
    server: tuple[str, list[str | None]], tmp_path: Path
) -> None:
    url, seen = server
    plugin = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "echo",
            "args": ['{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",'
                     '"status":{"token":"from-plugin"}}'],
            "interactiveMode": "Never",
        }
    }  # fmt: skip
    path = kubeconfig(tmp_path, url, plugin)
    assert read_credentials(path).unsupported == ("users.exec",)
    client = await KubeClient.from_environment(path)
    try:
        await client.server_version()
    finally:
        await client.close()
    assert seen == ["Bearer from-plugin"]


async def test_a_plain_kubeconfig_token_is_sent(server: tuple[str, list[str | None]], tmp_path: Path) -> None:
    url, seen = server
    client = await KubeClient.from_environment(kubeconfig(tmp_path, url, {"token": "plain"}))
    try:
        await client.server_version()
    finally:
        await client.close()
    assert seen == ["Bearer plain"]
