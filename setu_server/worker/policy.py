"""What a cloud connection may reach from inside setu-server.

The cloud worker runs every workspace's cloud connections in the server's
own process, so a connection must not reach what the server holds for
itself: its data folder (the embedded database and its socket, the blob
folder), its secrets file, its S3 credentials, services listening on its
loopback interface.

- Local files (a `sqlite` path, a `file` url) and PostgreSQL Unix sockets
  must lie under one folder (SETU_LOCAL_FILES_ROOT); the connector gets the
  resolved path, so what was checked is what is opened.
- A PostgreSQL host may not be a loopback address.
- An `s3://` file connection brings its own credentials, else botocore would
  lend it the server's.

A connection placed on an agent is bound by the agent's host only.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from setu_agent.engine.providers.base import ConfigError

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


class CloudPolicy:
    def __init__(self, local_root: Path) -> None:
        self._root = local_root.resolve()

    def __call__(self, provider: str, config: dict[str, Any]) -> dict[str, Any]:
        """The config to connect with (paths resolved); ConfigError when the
        connection reaches beyond what the cloud allows."""
        if provider == "sqlite":
            return config | {"path": self._local(str(config.get("path", "")), "config.path")}
        if provider == "file":
            url = str(config.get("url", ""))
            if not url.startswith("s3://"):
                return config | {"url": self._local(url, "config.url")}
            if not config.get("access_key_id") or not config.get("secret_access_key"):
                raise ConfigError(
                    "config.access_key_id: a cloud file connection on S3 brings its own "
                    "credentials (access_key_id, and secret_access_key as a secret reference)"
                )
        if provider == "postgres":
            host = str(config.get("host", "localhost"))
            if host.startswith(("/", "@")):  # a Unix socket folder
                return config | {"host": self._local(host, "config.host")}
            if _loopback(host):
                raise ConfigError(
                    f"config.host: {host} is this server itself; a cloud connection cannot "
                    f"reach it. Place the connection on an agent on that machine"
                )
        return config

    def _local(self, path: str, field: str) -> str:
        resolved = Path(path).expanduser().resolve()
        if not resolved.is_relative_to(self._root):
            raise ConfigError(
                f"{field}: a cloud connection may only use files under {self._root}; "
                f"move the file there, or place the connection on an agent that can reach it"
            )
        return str(resolved)


def _loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
