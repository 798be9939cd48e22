"""TLS towards setu-server: the one place that builds channel credentials,
and the options every client process takes for it.

Every process that calls the server (the SDK, `setu`, `setu admin`,
`setu-agent`, `setu-worker`, and the server for its own workers) takes the
same four settings, as flags or environment variables of one pattern:

    --tls           SETU_TLS           TLS with the system's roots
    --root-cert F   SETU_ROOT_CERT     PEM of the CA(s) to trust instead (implies TLS)
    --client-cert F SETU_CLIENT_CERT   PEM certificate for mutual TLS (implies TLS)
    --client-key F  SETU_CLIENT_KEY    its PEM private key
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import grpc

# Option (dest) -> environment variable; the flag is --dest with dashes.
TLS_ENVIRONMENT: dict[str, str] = {
    "tls": "SETU_TLS",
    "root_cert": "SETU_ROOT_CERT",
    "client_cert": "SETU_CLIENT_CERT",
    "client_key": "SETU_CLIENT_KEY",
}


@dataclass(frozen=True)
class TlsConfig:
    """TLS to setu-server.

    `root_cert` is the PEM of the CA (or CAs) that signed the server's
    certificate; None trusts the system's roots. `client_cert` and
    `client_key` (PEM, both or neither) are this client's certificate for a
    server that requires one (mutual TLS, `SETU_TLS_CLIENT_CA`).
    """

    root_cert: bytes | None = None
    client_cert: bytes | None = None
    client_key: bytes | None = None

    def __post_init__(self) -> None:
        if bool(self.client_cert) != bool(self.client_key):
            raise ValueError("a client certificate needs its key, and a key its certificate")

    @classmethod
    def from_files(
        cls,
        root_cert: str | Path | None = None,
        client_cert: str | Path | None = None,
        client_key: str | Path | None = None,
    ) -> TlsConfig:
        """Reads the PEM files named (OSError names the one that failed)."""

        def read(path: str | Path | None) -> bytes | None:
            return Path(path).read_bytes() if path else None

        return cls(read(root_cert), read(client_cert), read(client_key))

    def credentials(self) -> grpc.ChannelCredentials:
        # grpc here, not at the top: `setu --help` builds its TLS options
        # from this module and never opens a channel.
        import grpc

        return grpc.ssl_channel_credentials(
            root_certificates=self.root_cert,
            private_key=self.client_key,
            certificate_chain=self.client_cert,
        )


def tls_config(
    tls: bool | TlsConfig | None, root_certificates: bytes | None = None
) -> TlsConfig | None:
    """The TLS of a channel, from what the SDK's callers pass: a TlsConfig,
    or `tls=True` and/or `root_certificates`; None is plaintext."""
    if isinstance(tls, TlsConfig):
        return tls
    if tls or root_certificates:
        return TlsConfig(root_cert=root_certificates)
    return None


def add_tls_options(group: Any, *, from_environment: bool = True) -> None:
    """Adds --tls, --root-cert, --client-cert and --client-key to a parser or
    argument group. Their defaults come from the environment, or are
    SUPPRESS (`from_environment=False`) for a command line that takes them at
    several levels and fills in the rest with `tls_defaults`."""
    env = tls_defaults() if from_environment else {}

    def default(name: str) -> Any:
        return env[name] if from_environment else argparse.SUPPRESS

    group.add_argument(
        "--tls",
        action="store_true",
        default=default("tls"),
        help="connect with TLS, trusting the system's roots (env SETU_TLS)",
    )
    group.add_argument(
        "--root-cert",
        metavar="FILE",
        default=default("root_cert"),
        help="PEM of the CA that signed the server's certificate; implies --tls "
        "(env SETU_ROOT_CERT)",
    )
    group.add_argument(
        "--client-cert",
        metavar="FILE",
        default=default("client_cert"),
        help="PEM client certificate, for a server that requires one (mutual TLS); "
        "implies --tls (env SETU_CLIENT_CERT)",
    )
    group.add_argument(
        "--client-key",
        metavar="FILE",
        default=default("client_key"),
        help="PEM private key of --client-cert (env SETU_CLIENT_KEY)",
    )


def tls_defaults(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The TLS options' values when no flag gives them: the environment's."""
    env = os.environ if env is None else env
    return {
        name: (_truthy(env.get(variable, "")) if name == "tls" else env.get(variable, ""))
        for name, variable in TLS_ENVIRONMENT.items()
    }


def _truthy(value: str) -> bool:
    # SETU_TLS=0 (or false, no, off) means plaintext, as an operator reads it.
    return value.strip().lower() in {"1", "true", "yes", "on"}


def tls_from_options(args: argparse.Namespace) -> TlsConfig | None:
    """The TlsConfig the parsed options ask for (None: plaintext). Reads the
    files: OSError names one that cannot be read, ValueError a certificate
    without its key."""
    root, cert, key = (
        getattr(args, name, "") or "" for name in ("root_cert", "client_cert", "client_key")
    )
    if not (getattr(args, "tls", False) or root or cert or key):
        return None
    if bool(cert) != bool(key):
        raise ValueError("--client-cert and --client-key go together (SETU_CLIENT_CERT/_KEY)")
    return TlsConfig.from_files(root or None, cert or None, key or None)
