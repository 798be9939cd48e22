"""One scratch destination per provider for the conformance suite: how to
make it, connect to it, list what it holds (tables or files), and provoke a
real transient failure in it where one can be provoked.

A provider joins the suite with one entry in HARNESSES (and, for a server,
a fixture it needs in `place` below); every check then runs on it, driven by
what its capabilities declare.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from setu_engine.capabilities import Capabilities, Values
from setu_engine.providers import NAMES, get_provider
from setu_engine.providers.base import Connector
from tests.databases import postgres_config

# Holds `table` busy (a lock another session waits on), for as long as the
# block runs; the connector opened inside it waits briefly and fails.
Hold = Callable[["Place", str], contextlib.AbstractAsyncContextManager[None]]


@dataclass
class Place:
    """One provider's scratch destination for one test."""

    harness: Harness
    config: dict[str, Any]
    # What the destination holds (tables, files), to see nothing is left behind.
    objects: Callable[[], Awaitable[set[str]]]
    extra: dict[str, Any] = field(default_factory=dict)
    # The config as the server stores it (credentials as secret references).
    stored: dict[str, Any] | None = None

    @property
    def capabilities(self) -> Capabilities:
        return get_provider(self.harness.provider).capabilities

    @property
    def values(self) -> Values:
        return self.capabilities.values_of(self.config.get("format"))

    async def connect(self, **overrides: Any) -> Connector:
        return await get_provider(self.harness.provider).connect({**self.config, **overrides})


@dataclass(frozen=True)
class Harness:
    id: str
    provider: str
    # A lock another session holds, under which a write fails transiently
    # (None: the provider has no such failure to provoke for real).
    hold: Hold | None = None

    @property
    def registered(self) -> bool:
        return self.provider in NAMES


# -- postgres ------------------------------------------------------------------


async def postgres_objects(url: str) -> set[str]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT schemaname || '.' || tablename FROM pg_tables "
            "WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
        )
        return {r[0] for r in rows}
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def postgres_hold(place: Place, table: str) -> AsyncIterator[None]:
    """An ACCESS EXCLUSIVE lock on the table, and sessions of the database
    that give up waiting for a lock after 200 ms (55P03)."""
    url = place.extra["url"]
    holder = await asyncpg.connect(url)
    try:
        database = place.config["database"]
        await holder.execute(f'ALTER DATABASE "{database}" SET lock_timeout = 200')
        await holder.execute("BEGIN")
        await holder.execute(f'LOCK TABLE public."{table}" IN ACCESS EXCLUSIVE MODE')
        yield
    finally:
        await holder.close()


# -- sqlite --------------------------------------------------------------------


def sqlite_objects(path: Path) -> Callable[[], Awaitable[set[str]]]:
    def listed() -> set[str]:
        found = {f"file:{p.name}" for p in path.parent.iterdir()}
        if path.exists():
            conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
            try:
                rows = conn.execute("SELECT type || ':' || name FROM sqlite_master").fetchall()
            finally:
                conn.close()
            found |= {r[0] for r in rows}
        return found

    return lambda: asyncio.to_thread(listed)


@contextlib.asynccontextmanager
async def sqlite_hold(place: Place, table: str) -> AsyncIterator[None]:
    """Another connection's EXCLUSIVE transaction: a writer waits out
    sqlite3's busy timeout (5 s), then 'database is locked'."""
    holder = sqlite3.connect(place.config["path"], isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        yield
    finally:
        holder.close()


# -- files ---------------------------------------------------------------------


def folder_objects(folder: Path) -> Callable[[], Awaitable[set[str]]]:
    def listed() -> set[str]:
        return {str(p.relative_to(folder)) for p in folder.rglob("*")}

    return lambda: asyncio.to_thread(listed)


# -- mysql ---------------------------------------------------------------------


def mysql_objects(database: Any) -> Callable[[], Awaitable[set[str]]]:
    async def objects() -> set[str]:
        rows = await database.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            [database.name],
        )
        return {str(r[0]) for r in rows}

    return objects


@contextlib.asynccontextmanager
async def mysql_hold(place: Place, table: str) -> AsyncIterator[None]:
    """Every row of the table locked FOR UPDATE by another session, and new
    sessions that wait 1 s for a row lock (1205), restored after."""
    database = place.extra["database"]
    holder = await database.connect()
    before = await database.fetchval("SELECT @@GLOBAL.innodb_lock_wait_timeout")
    try:
        await database.execute("SET GLOBAL innodb_lock_wait_timeout = 1")
        await holder.autocommit(False)
        async with holder.cursor() as cursor:
            await cursor.execute(f"SELECT * FROM `{table}` FOR UPDATE")
        yield
    finally:
        await database.execute(f"SET GLOBAL innodb_lock_wait_timeout = {int(before)}")
        holder.close()
        await holder.ensure_closed()


# -- duckdb --------------------------------------------------------------------


def duckdb_objects(path: Path) -> Callable[[], Awaitable[set[str]]]:
    def listed() -> set[str]:
        found = {f"file:{p.name}" for p in path.parent.iterdir()}
        if path.exists():
            import duckdb

            # Only with no connector open: DuckDB shares one instance per
            # file in a process, and this one's configuration differs.
            conn = duckdb.connect(str(path), read_only=True)
            try:
                rows = conn.execute(
                    "SELECT table_schema || '.' || table_name FROM information_schema.tables"
                ).fetchall()
            finally:
                conn.close()
            found |= {str(r[0]) for r in rows}
        return found

    return lambda: asyncio.to_thread(listed)


HOLDER = """
import sys, duckdb
conn = duckdb.connect(sys.argv[1])
print("holding", flush=True)
sys.stdin.read()
"""


@contextlib.asynccontextmanager
async def duckdb_hold(place: Place, table: str) -> AsyncIterator[None]:
    """Another process holds the file open for writing (DuckDB's file lock)."""
    holder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        HOLDER,
        place.config["path"],
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None
        assert await holder.stdout.readline() == b"holding\n"
        yield
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        await holder.wait()


HARNESSES: tuple[Harness, ...] = (
    Harness("postgres", "postgres", postgres_hold),
    Harness("sqlite", "sqlite", sqlite_hold),
    Harness("file-jsonl", "file"),
    Harness("file-csv", "file"),
    Harness("file-parquet", "file"),
    Harness("mysql", "mysql", mysql_hold),
    Harness("duckdb", "duckdb", duckdb_hold),
)


def postgres_place(harness: Harness, url: str) -> Place:
    return Place(harness, postgres_config(url), lambda: postgres_objects(url), {"url": url})
