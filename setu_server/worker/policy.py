"""What a cloud connection may reach from inside setu-server.

The cloud worker runs every workspace's cloud connections in the server's
own process, so a connection must not reach what the server holds for
itself: its data folder (the embedded database, the blob folder), its
secrets file, its S3 credentials. Local files (a `sqlite` path, a `file`
url) must lie under one folder (SETU_LOCAL_FILES_ROOT); an `s3://` file
connection must bring its own credentials, else botocore would lend it the
server's. A connection placed on an agent is bound by the agent's host only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from setu_agent.engine.providers.base import ConfigError


class CloudPolicy:
    def __init__(self, local_root: Path) -> None:
        self._root = local_root.resolve()

    def __call__(self, provider: str, config: dict[str, Any]) -> None:
        if provider == "sqlite":
            self._local(str(config.get("path", "")), "config.path")
        elif provider == "file":
            url = str(config.get("url", ""))
            if url.startswith("s3://"):
                if not config.get("access_key_id") or not config.get("secret_access_key"):
                    raise ConfigError(
                        "config.access_key_id: a cloud file connection on S3 brings its own "
                        "credentials (access_key_id, and secret_access_key as a secret reference)"
                    )
            else:
                self._local(url, "config.url")

    def _local(self, path: str, field: str) -> None:
        resolved = Path(path).expanduser().resolve()
        if not resolved.is_relative_to(self._root):
            raise ConfigError(
                f"{field}: a cloud connection may only use files under {self._root}; "
                f"move the file there, or place the connection on an agent that can reach it"
            )
