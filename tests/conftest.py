"""Shared test plumbing: two PostgreSQL servers per session, a fresh
database per test.

Setu's own databases (`database_url`, cloned from a migrated template, so
tests never see each other's rows) live on one server: the embedded one from
`pgserver` (deleted at the end of the session), or the server named by
SETU_TEST_DATABASE_URL. Tenants' sources and destinations (`pg_server_url`,
tests/databases.py) live on another, as in production: a cloud connection
may not reach the server of Setu's own database by any path (its socket
folder, its port at any local address), so data on it would be refused. That
one is SETU_TEST_DATA_DATABASE_URL, or a second embedded server.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from setu_server.store import db
from setu_server.store.migrate import migrate
from tests import mariadb

TEMPLATE = "setu_test_template"

# Servers the tests spawn (`setu dev`, setu-server) serve the monitor on a
# free port: two at once would fight over the default 8080.
os.environ.setdefault("SETU_HTTP_LISTEN", "127.0.0.1:0")
# ...and as one process each (the default is one per core), unless a test asks.
os.environ.setdefault("SETU_PROCESSES", "1")


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


async def _admin_execute(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def _build_template(server_url: str) -> None:
    await _admin_execute(
        server_url,
        f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)",
        f"CREATE DATABASE {TEMPLATE}",
    )
    conn = await db.connect(with_database(server_url, TEMPLATE))
    try:
        await migrate(conn)
    finally:
        await conn.close()


def _postgres(setting: str, prefix: str) -> Iterator[str]:
    configured = os.environ.get(setting)
    if configured:
        yield configured
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    server = pgserver.get_server(folder / "pg", cleanup_mode="delete")
    try:
        yield server.get_uri("postgres")
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def setu_pg_url() -> Iterator[str]:
    """URL of a maintenance database on the server of Setu's own databases."""
    yield from _postgres("SETU_TEST_DATABASE_URL", "setu-test-pg-")


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """URL of a maintenance database on the tenants' PostgreSQL server
    (sources and destinations), never the server of Setu's own."""
    yield from _postgres("SETU_TEST_DATA_DATABASE_URL", "setu-test-data-pg-")


@pytest.fixture(scope="session")
def template_url(setu_pg_url: str) -> str:
    asyncio.run(_build_template(setu_pg_url))
    return with_database(setu_pg_url, TEMPLATE)


@pytest.fixture
async def database_url(setu_pg_url: str, template_url: str) -> AsyncIterator[str]:
    """A fresh, migrated database of Setu's own for this test alone."""
    name = f"setu_test_{uuid.uuid4().hex[:12]}"
    await _admin_execute(setu_pg_url, f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    try:
        yield with_database(setu_pg_url, name)
    finally:
        await _admin_execute(setu_pg_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
async def empty_database_url(setu_pg_url: str) -> AsyncIterator[str]:
    """A fresh database with no schema at all, on the server of Setu's own."""
    name = f"setu_empty_{uuid.uuid4().hex[:12]}"
    await _admin_execute(setu_pg_url, f"CREATE DATABASE {name}")
    try:
        yield with_database(setu_pg_url, name)
    finally:
        await _admin_execute(setu_pg_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await db.create_pool(database_url, max_size=4)
    try:
        yield pool
    finally:
        await pool.close()


# A real MariaDB server (tests/mariadb.py), started when a test first asks.


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[mariadb.MariaDB]:
    """The session's MariaDB server: SETU_TEST_MYSQL_URL's, or one of our own
    (deleted at the end of the session). Connect as its `user`/`password`."""
    if not os.environ.get("SETU_TEST_MYSQL_URL") and mariadb.mariadbd_binary() is None:
        pytest.skip("MariaDB is not installed: run scripts/ensure_test_tools.sh")
    with mariadb.started() as server:
        yield server


@pytest.fixture
async def mysql_database(mariadb_server: mariadb.MariaDB) -> AsyncIterator[mariadb.MySQLDatabase]:
    """A fresh, empty database on the session's MariaDB for this test alone;
    `mysql_database.config()` is the `mysql` provider's config for it."""
    async with mariadb.scratch_mysql_database(mariadb_server) as database:
        yield database


# A real S3-compatible server (moto on loopback) for blob and file-provider tests.
# PgBouncer in transaction mode in front of Setu's PostgreSQL (production topologies).
from tests.pooler import pgbouncer  # noqa: E402, F401
from tests.s3server import s3_bucket, s3_endpoint  # noqa: E402, F401
