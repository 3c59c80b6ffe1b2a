"""The embedded API server's HTTPS: a CA of its own and a serving certificate for 127.0.0.1, as kind's.

Clients of ``gpudra up``'s server reach it over HTTPS because kubectl (client-go) sends a kubeconfig's
credentials only over TLS: over plain HTTP it would be anonymous, and refused.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from gpudra.cluster.kubernetes.pki import ClusterPKI


@dataclass(frozen=True)
class ServingTLS:
    ca: Path
    """What clients trust (the kubeconfig's ``certificate-authority``)."""
    cert: Path
    key: Path

    def context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        return context


def new_serving_tls(directory: Path, host: str = "127.0.0.1") -> ServingTLS:
    """A new CA in ``directory`` and its certificate for ``host`` (and localhost), readable by the owner only."""
    pki = ClusterPKI(directory)
    serving = pki.serving("apiserver", (host, "localhost"))
    return ServingTLS(ca=pki.ca, cert=serving.cert, key=serving.key)
