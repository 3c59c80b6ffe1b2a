"""The HTTP transport of a client with plain credentials (a pod's service account, or a kubeconfig user with a
token or a client certificate): HTTP/1.1 on asyncio's streams (:mod:`gpudra.kube.http11`), without importing
kubernetes_asyncio or aiohttp.

Importing kubernetes_asyncio loads every generated API and model class of Kubernetes (about 1,600 modules,
40 MB of a process's memory, 0.8 s of start-up) although KubeClient uses none of them, and aiohttp's client adds
14 MiB more. The agent runs on every GPU node, so it talks to the API server through this transport; kubeconfigs
that need kubernetes_asyncio's loaders (exec and auth-provider plugins, basic auth, a proxy, several files) still
go through it (:class:`gpudra.kube.apitransport.HTTPTransport`).
"""

from __future__ import annotations

import contextlib
import json
import ssl
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

from gpudra.errors import ConfigurationError
from gpudra.kube.http11 import Endpoint, Pool
from gpudra.kube.kubeconfig import Credentials
from gpudra.kube.transport import Call, Reply

TOKEN_REREAD_SECONDS = 60.0
"""How long a token read from a file is used before the file is read again (client-go's period): the kubelet
rotates a pod's service-account token."""


def ssl_context(credentials: Credentials) -> ssl.SSLContext:
    """What kubernetes_asyncio's REST client builds: the CA (file or inline), the client certificate, and no
    verification when the kubeconfig says ``insecure-skip-tls-verify``. A file that cannot be read or is not PEM
    is a ConfigurationError naming it."""
    try:
        context = ssl.create_default_context(
            cafile=str(credentials.ca_path) if credentials.ca_path else None,
            cadata=credentials.ca_data.decode(errors="replace") if credentials.ca_data else None,
        )
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        where = credentials.ca_path or "certificate-authority-data"
        raise ConfigurationError(
            f"the cluster's certificate authority ({where}) cannot be used: {_why(exc)}"
        ) from exc
    try:
        if credentials.certificate_data is not None or credentials.private_key_data is not None:
            _load_inline_chain(context, credentials)
        elif credentials.certificate_path is not None:
            key = credentials.private_key_path
            context.load_cert_chain(str(credentials.certificate_path), keyfile=str(key) if key else None)
    except OSError as exc:
        where = credentials.certificate_path or "client-certificate-data"
        raise ConfigurationError(
            f"the client certificate ({where}) or its key cannot be used: {_why(exc)}"
        ) from exc
    if credentials.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _why(exc: BaseException) -> str:
    return str(exc.strerror) if isinstance(exc, OSError) and exc.strerror else str(exc)


def _load_inline_chain(context: ssl.SSLContext, credentials: Credentials) -> None:
    """ssl loads a certificate chain from files only: inline data is written to a private directory for it. Only
    a kubeconfig with inline client certificates gets here; a pod's in-cluster credentials (a token and a CA file)
    never do, so an agent on a read-only root filesystem with no /tmp needs no temporary directory."""
    with tempfile.TemporaryDirectory(prefix="gpudra-tls-") as directory:
        certificate, key = credentials.certificate_path, credentials.private_key_path
        if credentials.certificate_data is not None:
            certificate = Path(directory) / "client.crt"
            certificate.write_bytes(credentials.certificate_data)
        if credentials.private_key_data is not None:
            key = Path(directory) / "client.key"
            key.write_bytes(credentials.private_key_data)
        if certificate is not None:
            context.load_cert_chain(str(certificate), keyfile=str(key) if key else None)


class SessionTransport:
    """Requests to ``credentials.server`` with its token and TLS settings, over one connection pool of at most
    ``max_connections`` (every open watch holds one)."""

    def __init__(self, credentials: Credentials, *, max_connections: int = 100) -> None:
        self._credentials = credentials
        self._server = credentials.server.rstrip("/")
        tls = ssl_context(credentials) if self._server.startswith("https:") else None
        self._pool = Pool(Endpoint(self._server, tls), limit=max_connections)
        self._token = credentials.token
        self._token_read = time.monotonic()

    def _authorization(self) -> str | None:
        path = self._credentials.token_path
        if path is not None and time.monotonic() - self._token_read >= TOKEN_REREAD_SECONDS:
            with contextlib.suppress(OSError):  # keep the last token: the next period reads the file again
                self._token = path.read_text().strip()
            self._token_read = time.monotonic()
        return f"Bearer {self._token}" if self._token else None

    async def request(self, call: Call) -> Reply:
        headers = dict(call.headers)
        authorization = self._authorization()
        if authorization is not None:
            headers["Authorization"] = authorization
        target = call.path + ("?" + urlencode(call.query) if call.query else "")
        body = None if call.body is None else json.dumps(call.body).encode()
        return await self._pool.request(call.method, target, headers, body, call.timeout, gather=call.gather)

    async def close(self) -> None:
        await self._pool.close()
