"""Certificates made by the test session (the `cryptography` package): a
private CA, a server certificate it signs for 127.0.0.1 and localhost, a
client certificate it signs, and an unrelated CA with a client certificate
of its own. Files in a folder of the test's choosing."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Certificate validity is about the test host's real clock, not domain time.
_NOW = dt.datetime.now(dt.UTC)


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    ca: Path  # the private CA that signs the server's and the client's certificate
    server: KeyPair  # for 127.0.0.1 and localhost
    client: KeyPair  # signed by `ca`
    other_ca: Path  # an unrelated CA
    other_client: KeyPair  # signed by `other_ca`


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(
    subject: str, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_NOW - dt.timedelta(days=1))
        .not_valid_after(_NOW + dt.timedelta(days=2))
    )


def _write(
    folder: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> KeyPair:
    pair = KeyPair(folder / f"{stem}.crt", folder / f"{stem}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pair.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return pair


def _ca(folder: Path, stem: str) -> tuple[KeyPair, x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder(f"Setu test {stem}", _name(f"Setu test {stem}"), key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return _write(folder, stem, cert, key), cert, key


def _leaf(
    folder: Path,
    stem: str,
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    usage: x509.ObjectIdentifier,
    names: list[x509.GeneralName] | None = None,
) -> KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = _builder(stem, ca[0].subject, key).add_extension(
        x509.ExtendedKeyUsage([usage]), critical=False
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return _write(folder, stem, builder.sign(ca[1], hashes.SHA256()), key)


def make_pki(folder: Path) -> Pki:
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_cert, ca_key = _ca(folder, "ca")
    other, other_cert, other_key = _ca(folder, "other-ca")
    loopback: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    server = _leaf(folder, "server", (ca_cert, ca_key), ExtendedKeyUsageOID.SERVER_AUTH, loopback)
    client = _leaf(folder, "client", (ca_cert, ca_key), ExtendedKeyUsageOID.CLIENT_AUTH)
    stranger = _leaf(
        folder, "other-client", (other_cert, other_key), ExtendedKeyUsageOID.CLIENT_AUTH
    )
    return Pki(ca.cert, server, client, other.cert, stranger)
