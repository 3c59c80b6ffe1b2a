"""kubeconfig files: the credentials of their current context, and writing one for a user of a cluster.

The controller's kopf side and its client must use the same credentials: kopf's own kubeconfig login reads only
``$KUBECONFIG`` or ``~/.kube/config``, so a ``--kubeconfig`` path is read here and handed to both.
"""

from __future__ import annotations

import base64
import binascii
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpudra.errors import ConfigurationError


@dataclass(frozen=True)
class Credentials:
    """Who a client is and how it trusts the server (paths are absolute; data fields hold inline PEM)."""

    server: str
    ca_path: Path | None = None
    ca_data: bytes | None = None
    insecure: bool = False
    token: str | None = None
    certificate_path: Path | None = None
    certificate_data: bytes | None = None
    private_key_path: Path | None = None
    private_key_data: bytes | None = None
    namespace: str | None = None
    token_path: Path | None = None
    """Where ``token`` was read from, to read it again when it rotates (a service account's, ``tokenFile``)."""
    unsupported: tuple[str, ...] = ()
    """kubeconfig fields these credentials do not carry (``exec``, ``auth-provider``, ...): a client of them needs
    kubernetes_asyncio's loader."""


_CARRIED_USER_FIELDS = frozenset(
    {"token", "tokenFile", "client-certificate", "client-certificate-data", "client-key", "client-key-data"}
)
_CARRIED_CLUSTER_FIELDS = frozenset(
    {
        "server",
        "certificate-authority",
        "certificate-authority-data",
        "insecure-skip-tls-verify",
        "extensions",
    }
)


def _named(entries: Any, name: str, what: str, source: Path) -> dict[str, Any]:
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("name") == name:
            found = entry.get(what) or {}
            if not isinstance(found, dict):
                raise ConfigurationError(f"{source}: {what} {name!r} is not a mapping")
            return dict(found)
    raise ConfigurationError(f"{source}: no {what} named {name!r}")


def _path(value: Any, base: Path) -> Path | None:
    if not value:
        return None
    path = Path(str(value))
    return path if path.is_absolute() else base / path


def _data(value: Any, field: str, source: Path) -> bytes | None:
    if not value:
        return None
    try:
        return base64.b64decode("".join(str(value).split()), validate=True)  # line breaks skipped, as Go does
    except binascii.Error as exc:
        raise ConfigurationError(f"{source}: {field} is not base64 ({exc})") from exc


SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def in_cluster_credentials(
    environ: dict[str, str] | os._Environ[str] = os.environ, directory: Path = SERVICE_ACCOUNT_DIR
) -> Credentials | None:
    """A pod's own credentials, as client-go's in-cluster config reads them: the API server at
    ``KUBERNETES_SERVICE_HOST``:``KUBERNETES_SERVICE_PORT`` (the kubelet sets both; a chart may set them where
    the cluster has no service proxy), the service account's token (read afresh: the kubelet rotates it), CA and
    namespace. None outside a pod."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    token_file = directory / "token"
    if not host or not port or not token_file.is_file():
        return None
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address
    ca = directory / "ca.crt"
    namespace = directory / "namespace"
    return Credentials(
        server=f"https://{host}:{port}",
        ca_path=ca if ca.is_file() else None,
        token=token_file.read_text().strip(),
        token_path=token_file,
        namespace=namespace.read_text().strip() if namespace.is_file() else None,
    )


def read_credentials(path: Path) -> Credentials:
    """The current context's cluster and user, or ConfigurationError saying what is missing."""
    try:
        config = yaml.safe_load(path.read_text()) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigurationError(f"cannot read kubeconfig {path}: {exc}") from exc
    if not isinstance(config, dict):
        raise ConfigurationError(f"{path}: not a kubeconfig (a YAML mapping of clusters, users and contexts)")
    context_name = config.get("current-context")
    if not context_name:
        raise ConfigurationError(f"{path}: no current-context")
    context = _named(config.get("contexts"), context_name, "context", path)
    cluster = _named(config.get("clusters"), str(context.get("cluster")), "cluster", path)
    user = _named(config.get("users"), str(context.get("user")), "user", path)
    if not cluster.get("server"):
        raise ConfigurationError(f"{path}: cluster {context.get('cluster')!r} has no server")
    base = path.parent
    token = user.get("token")
    token_path = None
    if token is None and user.get("tokenFile"):
        token_path = _path(user["tokenFile"], base)
        try:
            token = (token_path or Path()).read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(
                f"{path}: user {context.get('user')!r}: cannot read its tokenFile: {exc}"
            ) from exc
    unsupported = sorted(
        {f"users.{k}" for k in user if k not in _CARRIED_USER_FIELDS}
        | {f"clusters.{k}" for k in cluster if k not in _CARRIED_CLUSTER_FIELDS}
    )
    return Credentials(
        server=str(cluster["server"]),
        ca_path=_path(cluster.get("certificate-authority"), base),
        ca_data=_data(cluster.get("certificate-authority-data"), "certificate-authority-data", path),
        insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
        token=token,
        certificate_path=_path(user.get("client-certificate"), base),
        certificate_data=_data(user.get("client-certificate-data"), "client-certificate-data", path),
        private_key_path=_path(user.get("client-key"), base),
        private_key_data=_data(user.get("client-key-data"), "client-key-data", path),
        namespace=context.get("namespace"),
        token_path=token_path,
        unsupported=tuple(unsupported),
    )


def kubeconfig_document(credentials: Credentials, *, name: str = "gpudra") -> dict[str, Any]:
    cluster: dict[str, Any] = {"server": credentials.server}
    if credentials.ca_path is not None:
        cluster["certificate-authority"] = str(credentials.ca_path)
    if credentials.insecure:
        cluster["insecure-skip-tls-verify"] = True
    user: dict[str, Any] = {}
    if credentials.token is not None:
        user["token"] = credentials.token
    if credentials.certificate_path is not None:
        user["client-certificate"] = str(credentials.certificate_path)
    if credentials.private_key_path is not None:
        user["client-key"] = str(credentials.private_key_path)
    context: dict[str, Any] = {"cluster": name, "user": name}
    if credentials.namespace:
        context["namespace"] = credentials.namespace
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": context}],
        "current-context": name,
    }


def write_kubeconfig(path: Path, credentials: Credentials, *, name: str = "gpudra") -> Path:
    """Write atomically, readable by the owner only (it may hold a token)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            yaml.safe_dump(kubeconfig_document(credentials, name=name), handle, sort_keys=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
