"""What a cloud connection may reach from a cloud worker.

A cloud worker runs every workspace's cloud connections, on the machines of
the control plane, so a connection must not reach what the control plane
holds for itself: its database (by socket or by address), the server's data
folder, the workers' secrets file and blob credentials, services listening
on loopback or on the private network, another workspace's files.

- Local files (a `sqlite` or `duckdb` path, a `file` url) and PostgreSQL Unix sockets
  must lie in the connection's workspace folder, `<SETU_LOCAL_FILES_ROOT>/
  <workspace id>/`: one workspace never reaches another's files. A relative
  path is taken from that folder. Every path is resolved with its links
  followed; the connector gets the resolved path, and the folder, which it
  checks again for every file a folder lists (a link inside may lead out).
  A root of `/` confines nothing, so it is one folder shared by all
  workspaces (tests, single-tenant setups).
- Whatever the root, `/` included, a PostgreSQL socket is never one of the
  control plane's own database: its socket folders (the server names them
  at check-in), reached by any path or link, and links to its sockets.
- A MySQL connection names its host (asyncmy would take `localhost`) and
  reaches it over TCP: a Unix socket path is refused in the cloud.
- Every socket goes to an address vetted by `egress` (setu_engine/
  egress.py): no loopback, private, link-local or metadata address unless
  the operator allows its network, and never Setu's own database.
- An `s3://` file connection brings its own credentials, else botocore would
  lend it the server's; drivers take nothing from the process environment.

A connection placed on an agent is bound by the agent's host only. A
worker of a one-person server (`SETU_CLOUD_REACH=local`, `setu dev`'s
default) reaches all its machine can (`LocalReach`), and still takes a
relative path from the workspace's folder: one rule for relative paths,
whatever the reach.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from setu_engine.errors import ConfigError
from setu_engine.support.egress import AddressPolicy, IPNetwork, parse_networks, protect_database


class CloudPolicy:
    """The cloud's rules for one workspace's connections (`for_workspace`);
    the server holds one unbound, which refuses every local path."""

    def __init__(
        self,
        local_root: Path,
        egress: AddressPolicy | None = None,
        workspace_id: str | None = None,
    ) -> None:
        self._root = local_root.resolve()
        self.egress = egress or AddressPolicy()
        self._workspace = workspace_id

    def for_workspace(self, workspace_id: object) -> CloudPolicy:
        """These rules as one workspace's connections meet them."""
        return CloudPolicy(self._root, self.egress, _workspace_of(workspace_id))

    @property
    def files_root(self) -> Path | None:
        """The folder every local file of the connection must resolve inside;
        None when unbound (no local file passes `__call__` then)."""
        if self._shared:
            return self._root
        if self._workspace is None:
            return None
        return (self._root / self._workspace).resolve()

    @property
    def _shared(self) -> bool:
        # A root of / confines nothing: splitting it per workspace would put
        # files in /<workspace id>/, which helps no one.
        return self._root == Path(self._root.anchor)

    def __call__(self, provider: str, config: dict[str, Any]) -> dict[str, Any]:
        """The config to connect with (paths resolved); ConfigError when the
        connection reaches beyond what the cloud allows."""
        if provider in ("sqlite", "duckdb"):
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
            if not host.strip():
                # asyncpg would fall back to PGHOST, then to the usual socket
                # folders (/run/postgresql, /tmp): this machine's own servers.
                raise ConfigError("config.host: empty; name the database's host")
            if host.startswith(("/", "@")):  # a Unix socket folder
                folder = self._local(host, "config.host")
                # Whatever the files root (`/` confines nothing), never the
                # control plane's own database.
                self.egress.check_socket(folder, _port(config), "config.host")
                return config | {"host": folder}
        if provider == "mysql":
            named = config.get("host")
            if not isinstance(named, str) or not named.strip():
                # asyncmy would take `localhost`: this machine's own server.
                raise ConfigError("config.host: required in the cloud; name the database's host")
            if named.startswith(("/", "@")):
                # A Unix socket reaches whatever listens on this machine; no
                # tenant's MySQL lives in the control plane's folders.
                raise ConfigError(
                    "config.host: a cloud connection reaches MySQL over TCP only, not a "
                    "Unix socket; name the database's host, or place the connection on an "
                    "agent that can reach the socket"
                )
        return config

    def _local(self, path: str, field: str) -> str:
        root = self.files_root
        if root is None:
            raise ConfigError(
                f"{field}: this cloud task names no workspace, so it may use no local files"
            )
        if not self._shared:
            # Made on first use, so a workspace's relative paths have a home.
            root.mkdir(parents=True, exist_ok=True)
        # Relative to the workspace folder (`path: crm.db`); `..` and links
        # are resolved before the check, so neither leads out of it.
        try:
            resolved = (root / path).resolve()
        except RuntimeError as exc:  # a loop of links
            raise ConfigError(f"{field}: {exc}") from exc
        if not resolved.is_relative_to(root):
            raise ConfigError(
                f"{field}: a cloud connection may only use files under its workspace "
                f"folder {root}/; give a path inside it (or relative to it), or place the "
                f"connection on an agent that can reach the file"
            )
        return str(resolved)


class LocalReach:
    """`SETU_CLOUD_REACH=local`: cloud connections reach every file and
    address this machine can; only a relative local path is placed, in the
    workspace's folder, as CloudPolicy places it (so `path: crm.db` names
    the same file under either reach, never one in the server's working
    folder). Absolute paths and `~` are taken as they are."""

    def __init__(self, local_root: Path, workspace_id: str | None = None) -> None:
        self._root = local_root.resolve()
        self._workspace = workspace_id

    @property
    def egress(self) -> None:
        return None  # every address: one person's machine

    @property
    def files_root(self) -> None:
        return None  # confines nothing

    def for_workspace(self, workspace_id: object) -> LocalReach:
        return LocalReach(self._root, _workspace_of(workspace_id))

    def __call__(self, provider: str, config: dict[str, Any]) -> dict[str, Any]:
        if provider in ("sqlite", "duckdb"):
            return config | {"path": self._placed(config.get("path"))}
        if provider == "file" and not str(config.get("url", "")).startswith("s3://"):
            return config | {"url": self._placed(config.get("url"))}
        return config

    def _placed(self, path: Any) -> Any:
        if not isinstance(path, str) or not path.strip() or Path(path).expanduser().is_absolute():
            return path  # absolute, or for validate_config to refuse
        home = CloudPolicy(self._root, workspace_id=self._workspace).files_root
        if home is None:
            return path  # no workspace named: as the process would take it
        home.mkdir(parents=True, exist_ok=True)  # so a relative path has a home
        return str(home / path)


def _workspace_of(workspace_id: object) -> str | None:
    """A workspace id as a folder's name: a UUID, never a path of its own."""
    try:
        return str(uuid.UUID(str(workspace_id)))
    except ValueError:
        return None


def _port(config: dict[str, Any]) -> int:
    port = config.get("port", 5432)
    return port if isinstance(port, int) else 5432  # validate_config refused any other


def cloud_egress(
    allow_networks: str,
    protected_endpoints: Iterable[str],
    local_ports: Iterable[int] = (),
    socket_folders: Iterable[str] = (),
) -> AddressPolicy:
    """The cloud's address policy: public addresses, the networks the
    operator allows, and never the control plane's own database as the
    server names it: its `host:port` endpoints, the ports it has on the
    server's machine (refused at every address of this machine) and its
    Unix socket folders."""
    protected: list[tuple[IPNetwork, int]] = []
    for endpoint in protected_endpoints:
        host, _, port = endpoint.rpartition(":")
        protected += protect_database(host.strip("[]"), int(port))
    return AddressPolicy(
        allow=parse_networks(allow_networks, "SETU_CLOUD_ALLOW_NETWORKS"),
        protected=tuple(protected),
        local_ports=frozenset(local_ports),
        socket_folders=tuple(socket_folders),
    )
