"""Numbered schema migrations, applied in order at startup.

A transaction-level advisory lock serialises concurrent servers: the first
applies what is missing, the others wait and then find nothing left to do.
The migrations missing are applied in one transaction that holds the lock:
an upgrade lands whole or not at all, and nothing outlives the transaction,
so this works through a transaction-mode pooler too, where a session-level
lock would be taken in one PostgreSQL session and released (or not) in
another, leaving the next server to wait on it for ever.
"""

from __future__ import annotations

import logging
import re
from importlib import resources

import asyncpg

from setu_server.store.queries import QUERIES

log = logging.getLogger(__name__)

# Any constant works; it only has to be the same in every server process.
_LOCK_KEY = 0x5E7A_0001
_FILENAME = re.compile(r"^(\d{4})_(\w+)\.sql$")


def migrations() -> list[tuple[int, str, str]]:
    """(version, name, sql) for every migration file, in order."""
    folder = resources.files(__package__) / "migrations"
    found = []
    for entry in folder.iterdir():
        match = _FILENAME.match(entry.name)
        if match:
            found.append((int(match[1]), match[2], entry.read_text()))
    found.sort()
    versions = [v for v, _, _ in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations must be numbered 1..n without gaps, found {versions}")
    return found


async def migrate(conn: asyncpg.Connection) -> list[int]:
    """Apply every migration not yet recorded; returns the versions applied."""
    applied_now: list[tuple[int, str]] = []
    async with conn.transaction():
        await conn.execute(QUERIES.migration_lock, _LOCK_KEY)
        await conn.execute(QUERIES.create_migration_table)
        done = {r["version"] for r in await conn.fetch(QUERIES.applied_migrations)}
        for version, name, sql in migrations():
            if version not in done:
                await conn.execute(sql)
                await conn.execute(QUERIES.record_migration, version, name)
                applied_now.append((version, name))
    for version, name in applied_now:
        log.info("migration applied", extra={"version": version, "migration": name})
    return [version for version, _ in applied_now]
