"""The cluster's certificates: one CA, the API server's serving certificate, client certificates for users and
components (the CN is the user name, each O a group, as kube-apiserver's x509 authenticator reads them) and the
service-account signing key. Files are written with 0600 permissions into one directory.

Every certificate carries a Subject Key Identifier and every issued one the CA's Authority Key Identifier, as
RFC 5280 asks and as strict X.509 verification checks: Python 3.13's default TLS context verifies strictly, and
refused the certificates made without them ("Missing Authority Key Identifier"), so no gpudra process on 3.13
could reach ``gpudra up``'s API server."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=30)


@dataclass(frozen=True)
class CertFiles:
    cert: Path
    key: Path


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(0o600)
    return path


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


class ClusterPKI:
    """A CA in ``directory`` that issues the cluster's certificates."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        now = datetime.datetime.now(datetime.UTC)
        self._not_before = now - datetime.timedelta(minutes=5)
        self._not_after = now + _VALIDITY
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpudra-cluster-ca")])
        self._ca_name = name
        self._ca_cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before)
            .not_valid_after(self._not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._ca_key.public_key()), critical=False
            )
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._ca_key, hashes.SHA256())
        )
        self.ca = _write(directory / "ca.crt", self._ca_cert.public_bytes(serialization.Encoding.PEM))

    def _issue(
        self,
        stem: str,
        common_name: str,
        *,
        groups: tuple[str, ...] = (),
        usage: x509.ObjectIdentifier | None = None,
        hosts: tuple[str, ...] = (),
    ) -> CertFiles:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
        subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(subject))
            .issuer_name(self._ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before)
            .not_valid_after(self._not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([usage or ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._ca_key.public_key()), critical=False
            )
        )
        if hosts:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())
        return CertFiles(
            cert=_write(self.directory / f"{stem}.crt", cert.public_bytes(serialization.Encoding.PEM)),
            key=_write(self.directory / f"{stem}.key", _key_pem(key)),
        )

    def serving(self, stem: str, hosts: tuple[str, ...]) -> CertFiles:
        return self._issue(stem, hosts[0], usage=ExtendedKeyUsageOID.SERVER_AUTH, hosts=hosts)

    def client(self, stem: str, user: str, *groups: str) -> CertFiles:
        return self._issue(stem, user, groups=groups)

    def service_account_key(self) -> CertFiles:
        """The key pair that signs service-account tokens (``cert`` holds the public key)."""
        key = ec.generate_private_key(ec.SECP256R1())
        public = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return CertFiles(
            cert=_write(self.directory / "sa.pub", public),
            key=_write(self.directory / "sa.key", _key_pem(key)),
        )
