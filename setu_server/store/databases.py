"""Databases beside Setu's own on its PostgreSQL server: `setu dev`'s demo
warehouse lives in one, so a newcomer's first run lands in a real
PostgreSQL without setting one up.

These statements name a database, which no query parameter can carry, so
they are built here with the name quoted rather than kept in queries/.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import asyncpg

from setu_client.errors import FailedPrecondition
from setu_server.store import db
from setu_server.store.queries import QUERIES


def quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def database_of(url: str) -> str:
    """The database a URL names (`setu` for postgresql://…/setu?host=…)."""
    return urlsplit(url).path.lstrip("/") or "postgres"


def with_database(url: str, name: str) -> str:
    """The same server, user and options, another database."""
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


async def ensure_database(url: str, name: str) -> bool:
    """Creates database `name` on the server of `url` unless it exists;
    True when it was created now."""
    conn = await db.connect(url)
    try:
        if await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
            return False
        # CREATE DATABASE cannot run in a transaction block, nor take a parameter.
        with db.translate_errors():
            try:
                await conn.execute(f"CREATE DATABASE {quote_identifier(name)}")
            except asyncpg.DuplicateDatabaseError:  # another process made it meanwhile
                return False
            except asyncpg.PostgresError as exc:  # no CREATEDB privilege, say
                raise FailedPrecondition(f"cannot create database {name}: {exc}") from exc
        return True
    finally:
        await conn.close()


async def own_settings(db_: db.Executor) -> dict[str, str]:
    """Where Setu's own PostgreSQL says it listens (port, and its socket
    folders when this role may read them)."""
    with db.translate_errors():
        rows = await db_.fetch(QUERIES.own_database_settings)
    return {row["name"]: row["setting"] for row in rows}
