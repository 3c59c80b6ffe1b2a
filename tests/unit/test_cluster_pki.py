"""The certificates gpudra makes (``gpudra up``'s API server, the real control plane's CA, serving and client
certificates) pass strict X.509 verification, as Python 3.13's default TLS context does it: made without key
identifiers they were refused there ("Missing Authority Key Identifier"), and no gpudra process on 3.13 reached
the embedded API server."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

from gpudra.cluster.apiserver.servingtls import new_serving_tls
from gpudra.cluster.kubernetes.pki import ClusterPKI


def strict(context: ssl.SSLContext) -> ssl.SSLContext:
    context.verify_flags |= ssl.VERIFY_X509_STRICT  # the default of ssl.create_default_context() from 3.13
    return context


async def handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> str:
    """Connect over TLS to a server that answers each connection with one line; the line."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello\n")
        await writer.drain()
        writer.close()

    listener = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=server)
    port = listener.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
        line = await reader.readline()
        writer.close()
        return line.decode().strip()
    finally:
        listener.close()


async def test_the_embedded_api_servers_certificate_passes_strict_verification(tmp_path: Path) -> None:
    tls = new_serving_tls(tmp_path)
    client = strict(ssl.create_default_context(cafile=str(tls.ca)))
    assert await asyncio.wait_for(handshake(tls.context(), client), 10) == "hello"


async def test_a_client_certificate_passes_strict_verification(tmp_path: Path) -> None:
    pki = ClusterPKI(tmp_path)
    serving = pki.serving("apiserver", ("127.0.0.1",))
    user = pki.client("admin", "kubernetes-admin", "system:masters")
    server = strict(ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca)))
    server.load_cert_chain(serving.cert, serving.key)
    server.verify_mode = ssl.CERT_REQUIRED
    client = strict(ssl.create_default_context(cafile=str(pki.ca)))
    client.load_cert_chain(user.cert, user.key)
    assert await asyncio.wait_for(handshake(server, client), 10) == "hello"
