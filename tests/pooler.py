"""PgBouncer in front of the session's PostgreSQL, for the production
topologies (docs/operations.md#postgresql-through-a-pooler).

Debian's pgbouncer (installed by scripts/ensure_test_tools.sh), started once
per session on a free port with an ini of its own: every database of the
session's server is reachable through it by the same name, users are
trusted (the session's PostgreSQL trusts local connections anyway), and
pool_mode is transaction unless a test asks for another. Stopped at the end
of the session.

    url = pgbouncer.url(database_url)  # the same database, through the pooler
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit, urlunsplit

import pytest

from tests.servers import free_port, tool_process


@dataclass(frozen=True)
class PgBouncer:
    port: int
    pool_mode: str
    log_path: Path

    def url(self, database_url: str) -> str:
        """`database_url`'s database and user, through this pooler (TCP on loopback)."""
        parts = urlsplit(database_url)
        user = parts.username or "postgres"
        return urlunsplit(parts._replace(netloc=f"{user}@127.0.0.1:{self.port}", query=""))


def pgbouncer_binary() -> str | None:
    # CI's PATH may lack /usr/sbin, where Debian puts it.
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")


def _backend(server_url: str) -> tuple[str, int]:
    """(host or socket folder, port) of the PostgreSQL `server_url` names."""
    parts = urlsplit(server_url)
    host = parse_qs(parts.query).get("host", [parts.hostname or "127.0.0.1"])[0]
    if parts.port:
        return host, parts.port
    if host.startswith("/"):  # pgserver names the folder only: the socket says the port
        for socket in Path(host).glob(".s.PGSQL.*"):
            if socket.suffix != ".lock":
                return host, int(socket.suffix.lstrip("."))
    return host, 5432


def _run_as(host: str) -> str | None:
    """PgBouncer refuses to run as root: then it runs as the owner of the
    server's socket folder (pgserver keeps its socket in its data folder,
    which only its own user may enter), or another user."""
    if os.geteuid() != 0:
        return None
    with contextlib.suppress(OSError, KeyError):
        owner = Path(host).stat().st_uid
        if owner != 0:
            return pwd.getpwuid(owner).pw_name
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise RuntimeError("pgbouncer will not run as root and there is no other user")


@contextlib.contextmanager
def running_pgbouncer(server_url: str, pool_mode: str = "transaction") -> Iterator[PgBouncer]:
    """A pgbouncer in front of `server_url`'s server, until the block ends."""
    binary = pgbouncer_binary()
    if binary is None:
        pytest.skip("pgbouncer is not installed: run scripts/ensure_test_tools.sh")
    host, backend_port = _backend(server_url)
    folder = Path(tempfile.mkdtemp(prefix="setu-pgbouncer-"))
    port = free_port()
    (folder / "userlist.txt").write_text('"postgres" ""\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={host} port={backend_port}\n"
        "[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {port}\n"
        f"unix_socket_dir = {folder}\n"
        "auth_type = trust\n"
        f"auth_file = {folder / 'userlist.txt'}\n"
        f"pool_mode = {pool_mode}\n"
        "max_client_conn = 2000\n"
        "default_pool_size = 40\n"
        "admin_users = postgres\n"
    )
    user = _run_as(host)
    if user is not None:
        os.chown(folder, pwd.getpwnam(user).pw_uid, -1)
    log_path = folder / "pgbouncer.log"
    command = [binary, *(("-u", user) if user else ()), str(folder / "pgbouncer.ini")]

    def listening(line: bytes) -> bool:
        return b"listening on" in line and b"127.0.0.1" in line

    try:
        with tool_process(command, log_path, listening, "pgbouncer"):
            yield PgBouncer(port, pool_mode, log_path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def pgbouncer(template_url: str) -> Iterator[PgBouncer]:
    """Transaction-mode PgBouncer in front of the PostgreSQL server of Setu's
    own databases (the template's server: `database_url` lives there too)."""
    with running_pgbouncer(template_url, "transaction") as bouncer:
        yield bouncer
