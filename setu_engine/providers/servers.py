"""What the providers of a database server reached over the network share
(postgres, mysql): the checks of their connection fields beyond identity,
and the TLS context of an `ssl` mode."""

from __future__ import annotations

import ssl
from typing import Any

from setu_engine.errors import ConfigError
from setu_engine.support.secrets import check_reference, is_reference

SSL_MODES = ("disable", "prefer", "require", "verify-ca", "verify-full")


def _number(value: Any) -> bool:
    # bool is an int to Python, but `true` is no port or timeout.
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_server_fields(config: dict[str, Any], default_port: int) -> None:
    """Raises ConfigError naming the field when `port`, `password`, `ssl`
    or `connect_timeout` is wrong."""
    port = config.get("port", default_port)
    if not _number(port) or int(port) != port or not 0 < port < 65536:
        raise ConfigError("config.port: an integer from 1 to 65535")
    if "password" in config:
        if not is_reference(config["password"]):
            raise ConfigError(
                'config.password: must be a secret reference {"$secret": "NAME"}; '
                "plain credentials are never stored"
            )
        check_reference(config["password"], "config.password")
    if config.get("ssl", "prefer") not in SSL_MODES:
        raise ConfigError(f"config.ssl: one of {', '.join(SSL_MODES)}")
    timeout = config.get("connect_timeout", 10)
    if not _number(timeout) or not 0 < timeout <= 300:
        raise ConfigError("config.connect_timeout: seconds, more than 0 and at most 300")


class _NamedContext(ssl.SSLContext):
    """An SSL context that presents and verifies `server_name` whatever
    address the socket was opened to: the drivers hand the address they
    connected to (the vetted address of that name) as the server name."""

    server_name: str = ""

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:
        kwargs["server_hostname"] = self.server_name or kwargs.get("server_hostname")
        return super().wrap_bio(*args, **kwargs)


def tls_context(mode: str, server_name: str) -> ssl.SSLContext | None:
    """The TLS context of an ssl mode (None for `disable`), built here rather
    than by a driver, which would read client keys and roots from the
    process's environment."""
    if mode == "disable":
        return None
    context = _NamedContext(ssl.PROTOCOL_TLS_CLIENT)
    context.server_name = server_name
    if mode in ("prefer", "require"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context.load_default_certs()
        context.check_hostname = mode == "verify-full"
    return context
