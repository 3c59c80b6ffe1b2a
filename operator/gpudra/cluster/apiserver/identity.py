"""Who a request to the embedded API server comes from: the identities of ``gpudra up``'s components, and the
bearer tokens that carry them over HTTP.

A token is signed, as kube-apiserver's service-account tokens are: ``gpudra.<identity>.<HMAC-SHA256>`` with a
key that only the process that started the server holds (and the server, when it runs as a process of its own).
Whoever holds the key can issue a token for any identity, as whoever holds kube-apiserver's
``--service-account-signing-key-file`` can; nothing else can. Requests from the server's own process (local.py)
carry their :class:`Identity` directly, and are authorized as a request with its token would be.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass

from .status import APIStatusError

AUTHENTICATED = "system:authenticated"
MASTERS = "system:masters"
_PREFIX = "gpudra"


@dataclass(frozen=True, slots=True)
class Identity:
    """A user as kube-apiserver's authenticators hand it to authorization: a name and its groups."""

    user: str
    groups: tuple[str, ...] = (AUTHENTICATED,)


ADMIN = Identity("gpudra-admin", (MASTERS, AUTHENTICATED))
"""The user of the kubeconfig ``gpudra up`` writes, as kind's ``kubernetes-admin``: in system:masters."""
SCHEDULER = Identity("system:kube-scheduler")
"""The stand-in scheduler and controller manager (cluster/controlplane), which run as one."""


def service_account(namespace: str, name: str) -> Identity:
    """A ServiceAccount's user and groups, as a token of it authenticates on kube-apiserver."""
    return Identity(
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED),
    )


def node_identity(name: str) -> Identity:
    """A kubelet's user and group, as its client certificate authenticates on kube-apiserver."""
    return Identity(f"system:node:{name}", ("system:nodes", AUTHENTICATED))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenIssuer:
    """Issues and verifies the bearer tokens of one embedded API server (``key``: a fresh random one if None)."""

    def __init__(self, key: bytes | None = None) -> None:
        self.key = key if key is not None else secrets.token_bytes(32)
        self._verified: dict[str, Identity] = {}

    def _signature(self, payload: str) -> str:
        return _b64(hmac.new(self.key, payload.encode(), hashlib.sha256).digest())

    def issue(self, identity: Identity) -> str:
        payload = _b64(json.dumps({"user": identity.user, "groups": list(identity.groups)}).encode())
        return f"{_PREFIX}.{payload}.{self._signature(payload)}"

    def verify(self, token: str) -> Identity | None:
        """The identity a token carries; None for one this issuer did not sign."""
        known = self._verified.get(token)
        if known is not None:
            return known
        prefix, _, rest = token.partition(".")
        payload, _, signature = rest.partition(".")
        if prefix != _PREFIX or not hmac.compare_digest(signature, self._signature(payload)):
            return None
        try:
            claims = json.loads(_unb64(payload))
            identity = Identity(str(claims["user"]), tuple(str(g) for g in claims["groups"]))
        except (binascii.Error, ValueError, KeyError, TypeError):
            return None
        self._verified[token] = identity  # only signed tokens: as many as the server's issuer handed out
        return identity


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def unauthorized() -> APIStatusError:
    """kube-apiserver 1.37.2's answer, with ``--anonymous-auth=false``, to a request without valid credentials
    (every path, the health endpoints included): recorded in tests/authkit.py."""
    return APIStatusError(401, "Unauthorized", "Unauthorized")
