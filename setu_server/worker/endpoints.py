"""The server's own database as its cloud workers must refuse it, whatever
networks the operator allows and whatever the files root. The server names
it to them at check-in; the workers never see the database URL itself.

Named: every TCP `host:port` the URL holds (and the LISTEN URL, which may
go past a pooler to PostgreSQL itself); and when the database runs on
this machine (its host is loopback, one of this machine's addresses, a Unix
socket folder, the embedded server), its ports at every address of this
machine, as the addresses are at that check-in (a worker beside the server
also checks its own machine's live addresses at each connection), and its
socket folders: the URL's, and those PostgreSQL itself reports when the
role may read them (else the usual ones, /run/postgresql, /tmp…, since a
local server has a socket somewhere).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from setu_engine.support import this_machine

# Where libpq and asyncpg look for a socket when a URL names no host.
DEFAULT_SOCKET_FOLDERS = ("/run/postgresql", "/var/run/postgresql", "/tmp")


@dataclass(frozen=True)
class OwnDatabase:
    """What the workers refuse; `endpoints()` is read at each check-in."""

    tcp: tuple[str, ...] = ()
    local_ports: tuple[int, ...] = ()
    socket_folders: tuple[str, ...] = ()

    def endpoints(self) -> list[str]:
        """The URL's TCP endpoints and, for a database on this machine,
        every address of this machine now at each of its ports."""
        found = list(self.tcp)
        if self.local_ports:
            for address in sorted(this_machine.addresses(), key=str):
                for port in self.local_ports:
                    found.append(_endpoint(str(address), port))
        return list(dict.fromkeys(found))


def own_database(
    url: str,
    reported: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    also: Sequence[str] = (),
) -> OwnDatabase:
    """The database of `url` as the workers must refuse it. `reported` is
    what PostgreSQL says of itself (pg_settings: port, and
    unix_socket_directories when this role may read it). `also`: other
    URLs of the same database (SETU_LISTEN_DATABASE_URL, which goes past a
    pooler to PostgreSQL itself), refused as well."""
    reported = reported or {}
    environ = os.environ if env is None else env
    hosts = [h for u in (url, *also) if u for h in _hosts(u, environ)]
    tcp = list(dict.fromkeys(_endpoint(h, p) for h, p in hosts if not h.startswith("/")))
    local = any(h.startswith("/") or _is_local(h) for h, _ in hosts)
    if not local:
        return OwnDatabase(tuple(tcp))
    ports = [p for _, p in hosts]
    if reported.get("port", "").isdigit():
        ports.append(int(reported["port"]))
    folders = [_folder(h) for h, _ in hosts if h.startswith("/")]
    if "unix_socket_directories" in reported:
        folders += [
            f.strip().strip('"')
            for f in reported["unix_socket_directories"].split(",")
            if f.strip().strip('"').startswith("/")
        ]
    else:
        folders += DEFAULT_SOCKET_FOLDERS
    return OwnDatabase(
        tuple(tcp),
        tuple(dict.fromkeys(ports)),
        tuple(dict.fromkeys(folders)),
    )


def _hosts(url: str, env: Mapping[str, str]) -> list[tuple[str, int]]:
    """(host, port) for every host the URL names: sockets as folders or
    files, TCP hosts as names. No host: PGHOST, else the usual folders and
    localhost, as asyncpg would try them."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    netloc = parts.netloc.rpartition("@")[2]
    hosts = query.get("host") or ([unquote(netloc)] if netloc else [])
    if not hosts and env.get("PGHOST"):
        hosts = [env["PGHOST"]]
    ports = [p for spec in query.get("port", []) for p in spec.split(",") if p.strip()]
    default = int(ports[0]) if ports else int(env.get("PGPORT", "5432") or 5432)
    if not hosts:
        return [(h, default) for h in (*DEFAULT_SOCKET_FOLDERS, "localhost")]
    found = []
    for spec in ",".join(hosts).split(","):
        host, port = spec, ""
        if spec.startswith("["):
            host, _, rest = spec[1:].partition("]")
            port = rest.lstrip(":")
        elif spec.count(":") == 1 and not spec.startswith("/"):
            host, port = spec.split(":")
        if host:
            found.append((host, int(port) if port.isdigit() else default))
    return found


def _endpoint(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _folder(host: str) -> str:
    path = Path(host)
    folder = path.parent if ".s.PGSQL." in path.name else path
    try:
        return str(folder.resolve())
    except (OSError, RuntimeError):
        return str(folder)


def _is_local(host: str) -> bool:
    try:
        answers = socket.getaddrinfo(host.strip("[]"), None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    return any(
        this_machine.is_this_machine(ipaddress.ip_address(str(a[4][0]).partition("%")[0]))
        for a in answers
    )
