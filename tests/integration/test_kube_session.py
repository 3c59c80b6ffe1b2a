"""The agent's API client without kubernetes_asyncio (gpudra.kube.session): a kubelet-rotated service-account token
is used once it is read again, and a kubeconfig whose user needs a plugin still reaches its server through
kubernetes_asyncio's loader instead of going out without credentials, and an HTTPS server is reached through the
environment's proxy."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest
from aiohttp import web

from clusterkit import StartCluster
from gpudra.kube import session
from gpudra.kube.client import KubeClient
from gpudra.kube.kubeconfig import Credentials, read_credentials
from gpudra.kube.resources import NODES


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


async def test_an_https_server_is_reached_through_the_environments_proxy_with_connect(
    start_cluster: StartCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded API server serves HTTPS with its own CA, as kube-apiserver does; with HTTPS_PROXY set the
    client tunnels to it with CONNECT and checks the server's certificate through the tunnel."""
    cluster = await start_cluster("l4x4:1")
    credentials = read_credentials(cluster.options.kubeconfig)
    assert credentials.server.startswith("https://")
    tunnels: list[str] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        method, target, _ = head.split(" ", 2)
        tunnels.append(f"{method} {target}")
        host, _, port = target.rpartition(":")
        upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    listener = await asyncio.start_server(proxy, "127.0.0.1", 0)
    async with listener:
        port = listener.sockets[0].getsockname()[1]
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("NO_PROXY", "")
        client = KubeClient(session.SessionTransport(credentials))
        try:
            nodes, _ = await client.list_raw(NODES)
        finally:
            await client.close()
    assert [n["metadata"]["name"] for n in nodes] == ["l4x4-0"]
    authority = credentials.server.removeprefix("https://").rstrip("/")
    assert tunnels == [f"CONNECT {authority}"]
