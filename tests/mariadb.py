"""A real MariaDB server for tests and benchmarks, and scratch databases on it.

Debian's `mariadb-server` (installed by scripts/ensure_test_tools.sh) is
started once per session, lazily (only when a test asks for it), in a
temporary folder of its own: a fresh data folder from `mariadb-install-db`,
TCP on a free port of 127.0.0.1 and a socket in that folder, InnoDB tuned
for speed (no binary log, the redo log flushed once a second), LOCAL INFILE
allowed, and server-side files (`INTO OUTFILE`, `LOAD DATA INFILE`) kept to
the folder's `files/`. A user `setu` with a password and all privileges is
created; tests connect as it over TCP, as a tenant's connection would.
SETU_TEST_MYSQL_URL (`mysql://user:password@host:port`) names an external
server instead, whose user must be allowed to create databases.

No pytest here: scripts/bench_copy.py starts its server with `started()`.
The fixtures (`mariadb_server`, `mysql_database`) are in tests/conftest.py.

    async with scratch_mysql_database(server) as database:
        await database.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        config = database.config()  # the `mysql` provider's config
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

URL_SETTING = "SETU_TEST_MYSQL_URL"
USER = "setu"
# A fixed password: the server listens on loopback only and lives for one session.
PASSWORD = "setu-test-password"
# Startup of a fresh server takes about a second; a loaded CI machine may take longer.
START_DEADLINE = 60.0
STOP_DEADLINE = 60.0


def mariadbd_binary() -> str | None:
    # CI's PATH may lack /usr/sbin, where Debian puts it.
    return shutil.which("mariadbd") or shutil.which("mariadbd", path="/usr/sbin")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class MariaDB:
    """Where a MariaDB server is and how to reach it: `user`/`password` is
    the account tests and Setu use (all privileges); `socket` is None for an
    external server; `files` is the folder the server may read and write
    files in (`INTO OUTFILE`, `LOAD DATA INFILE`), None when unknown."""

    host: str
    port: int
    user: str
    password: str
    socket: str | None = None
    files: Path | None = None

    @property
    def url(self) -> str:
        return f"mysql://{self.user}:{self.password}@{self.host}:{self.port}"

    def config(self, database: str, **overrides: Any) -> dict[str, Any]:
        """The `mysql` provider's config for `database` on this server."""
        return mysql_config(self, database, **overrides)

    async def connect(self, database: str | None = None, **options: Any) -> Any:
        """An asyncmy connection (autocommit) as `user`, over TCP."""
        import asyncmy  # type: ignore[import-untyped,unused-ignore]

        return await asyncmy.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            database=database,
            autocommit=True,
            charset="utf8mb4",
            **options,
        )

    async def execute(self, *statements: str, database: str | None = None) -> None:
        """Runs each statement in turn on one connection."""
        conn = await self.connect(database)
        try:
            async with conn.cursor() as cursor:
                for statement in statements:
                    await cursor.execute(statement)
        finally:
            conn.close()
            await conn.ensure_closed()

    async def fetch(
        self, query: str, args: Sequence[Any] | None = None, database: str | None = None
    ) -> list[tuple[Any, ...]]:
        """The rows `query` answers (`%s` placeholders for `args`)."""
        conn = await self.connect(database)
        try:
            async with conn.cursor() as cursor:
                await cursor.execute(query, args)
                return list(await cursor.fetchall())
        finally:
            conn.close()
            await conn.ensure_closed()

    async def fetchval(
        self, query: str, args: Sequence[Any] | None = None, database: str | None = None
    ) -> Any:
        """The first column of the first row `query` answers (None when no row)."""
        rows = await self.fetch(query, args, database)
        return rows[0][0] if rows else None


def mysql_config(server: MariaDB, database: str, **overrides: Any) -> dict[str, Any]:
    """The `mysql` provider's config for `database` on `server`, the
    password as a plain value (tests of secret references make their own)."""
    config: dict[str, Any] = {
        "host": server.host,
        "port": server.port,
        "database": database,
        "user": server.user,
        "password": server.password,
    }
    return config | overrides


def external(url: str) -> MariaDB:
    """The server `url` (`mysql://user:password@host:port`) names."""
    parts = urlsplit(url)
    if parts.scheme not in ("mysql", "mariadb") or not parts.hostname:
        raise RuntimeError(f"{URL_SETTING} must look like mysql://user:password@host:port")
    return MariaDB(
        host=parts.hostname,
        port=parts.port or 3306,
        user=unquote(parts.username or "root"),
        password=unquote(parts.password or ""),
    )


@dataclass(frozen=True)
class MySQLDatabase:
    """A scratch database on `server`, with helpers that run in it."""

    server: MariaDB
    name: str

    def config(self, **overrides: Any) -> dict[str, Any]:
        return mysql_config(self.server, self.name, **overrides)

    async def connect(self, **options: Any) -> Any:
        return await self.server.connect(self.name, **options)

    async def execute(self, *statements: str) -> None:
        await self.server.execute(*statements, database=self.name)

    async def fetch(self, query: str, args: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        return await self.server.fetch(query, args, self.name)

    async def fetchval(self, query: str, args: Sequence[Any] | None = None) -> Any:
        return await self.server.fetchval(query, args, self.name)


@contextlib.asynccontextmanager
async def scratch_mysql_database(
    server: MariaDB, prefix: str = "setu_data"
) -> AsyncIterator[MySQLDatabase]:
    """A fresh, empty utf8mb4 database on `server`, dropped after the block."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    await server.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    try:
        yield MySQLDatabase(server, name)
    finally:
        await server.execute(f"DROP DATABASE IF EXISTS `{name}`")


@dataclass
class OwnMariaDB:
    """A MariaDB server process in a folder of its own, on a fixed port and
    socket, which its owner may stop, kill and start again (the data folder
    stays until `remove()`)."""

    folder: Path
    port: int = field(default_factory=_free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def socket(self) -> Path:
        return self.folder / "mariadb.sock"

    @property
    def log(self) -> Path:
        return self.folder / "mariadb.log"

    @property
    def server(self) -> MariaDB:
        return MariaDB(
            host="127.0.0.1",
            port=self.port,
            user=USER,
            password=PASSWORD,
            socket=str(self.socket),
            files=self.folder / "files",
        )

    def _as_root(self) -> list[str]:
        # mariadbd refuses to run as root unless told to, and the installer
        # must make the data folder the server's user's.
        return ["--user=root"] if os.geteuid() == 0 else []

    def install(self) -> None:
        """A fresh data folder, with the `setu` user (created at first start)."""
        binary = mariadbd_binary()
        installer = shutil.which("mariadb-install-db")
        if binary is None or installer is None:
            raise RuntimeError("MariaDB is not installed: run scripts/ensure_test_tools.sh")
        (self.folder / "files").mkdir(parents=True, exist_ok=True)
        # The account of tests and Setu, made by the server's first start.
        (self.folder / "init.sql").write_text(
            f"CREATE USER IF NOT EXISTS '{USER}'@'%' IDENTIFIED BY '{PASSWORD}';\n"
            f"GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'%' WITH GRANT OPTION;\n"
        )
        with self.log.open("ab") as log:
            subprocess.run(
                [
                    installer,
                    "--no-defaults",
                    f"--datadir={self.data}",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                    *self._as_root(),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                check=True,
                timeout=START_DEADLINE,
            )

    def start(self) -> None:
        """Starts the server and returns once it answers a real connection
        (RuntimeError when it exits first or START_DEADLINE passes)."""
        binary = mariadbd_binary()
        assert binary is not None
        command = [
            binary,
            "--no-defaults",
            *self._as_root(),
            f"--datadir={self.data}",
            f"--socket={self.socket}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--pid-file={self.folder / 'mariadb.pid'}",
            f"--init-file={self.folder / 'init.sql'}",
            f"--secure-file-priv={self.folder / 'files'}",
            "--local-infile=1",
            "--skip-name-resolve",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_general_ci",
            # Speed over durability: a test server's data outlives no crash.
            "--innodb-buffer-pool-size=256M",
            "--innodb-log-file-size=256M",
            "--innodb-flush-log-at-trx-commit=2",
            "--innodb-doublewrite=0",
            "--skip-log-bin",
            "--max-connections=500",
        ]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_DEADLINE
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"mariadbd exited ({self.process.returncode}); see {self.log}")
            if _run(_answers(self.server)):
                return
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(
                    f"mariadbd did not answer in {START_DEADLINE:.0f} s; see {self.log}"
                )
            time.sleep(0.05)  # server startup, not a test's wait

    def stop(self) -> None:
        """A clean shutdown (SIGTERM), SIGKILL if it lingers."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(STOP_DEADLINE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def kill(self) -> None:
        """A crash: SIGKILL, every session cut at once (InnoDB recovers at the next start)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGKILL)
        process.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


def _run(coroutine: Coroutine[Any, Any, bool]) -> bool:
    """`coroutine`'s result from sync code, in a thread of its own when this
    thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def _answers(server: MariaDB) -> bool:
    """Whether `server` accepts a connection as its `setu` user and answers."""
    try:
        rows = await server.fetch("SELECT 1")
    except Exception:  # refused, not yet listening, the user not yet created
        return False
    return rows == [(1,)]


def start_own(prefix: str = "setu-test-mariadb-") -> OwnMariaDB:
    """A fresh, running server in a new temporary folder."""
    own = OwnMariaDB(Path(tempfile.mkdtemp(prefix=prefix)))
    try:
        own.install()
        own.start()
    except BaseException:
        own.remove()
        raise
    return own


@contextlib.contextmanager
def started(prefix: str = "setu-test-mariadb-") -> Iterator[MariaDB]:
    """The session's server: SETU_TEST_MYSQL_URL's, or one of our own that
    is stopped and deleted after the block."""
    configured = os.environ.get(URL_SETTING)
    if configured:
        yield external(configured)
        return
    own = start_own(prefix)
    try:
        yield own.server
    finally:
        own.remove()


class OwnMariaDBControl:
    """`own_mariadb()`'s server, for tests that stop, kill or restart it
    under a run: each step returns once done (start: once it answers)."""

    def __init__(self, own: OwnMariaDB) -> None:
        self._own = own
        self.server = own.server

    def config(self, database: str, **overrides: Any) -> dict[str, Any]:
        return mysql_config(self.server, database, **overrides)

    async def stop(self) -> None:
        await asyncio.to_thread(self._own.stop)

    async def kill(self) -> None:
        await asyncio.to_thread(self._own.kill)

    async def start(self) -> None:
        await asyncio.to_thread(self._own.start)

    async def restart(self) -> None:
        await asyncio.to_thread(self._own.restart)


@contextlib.asynccontextmanager
async def own_mariadb() -> AsyncIterator[OwnMariaDBControl]:
    """A fresh MariaDB server for one test, deleted after it."""
    own = await asyncio.to_thread(start_own, "setu-test-own-mariadb-")
    try:
        yield OwnMariaDBControl(own)
    finally:
        await asyncio.to_thread(own.remove)
