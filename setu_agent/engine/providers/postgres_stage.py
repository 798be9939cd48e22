"""Staging tables of resumable loads in PostgreSQL (engine/resumable.py)."""

from __future__ import annotations

import asyncpg

# A logged table, never UNLOGGED: PostgreSQL empties an unlogged table after
# a crash of its own, while the part markers, committed with the rows, would
# still say the parts are there.
CREATE_STAGE = "CREATE TABLE IF NOT EXISTS {relation} ({columns})"

# The apply reads the staging table in the order its parts were copied (an
# upsert keeps the last row of a key, as a one-transaction load does): no
# parallel scan, and no scan that joins another one midway through the heap.
APPLY_SETTINGS = (
    "SET LOCAL TimeZone = 'UTC'",
    "SET LOCAL max_parallel_workers_per_gather = 0",
    "SET LOCAL synchronize_seqscans = off",
)


async def create(conn: asyncpg.Connection, relation: str, columns: str) -> None:
    """The staging table, created if missing: apart from any part and under
    a lock, so two attempts cannot race to create it."""
    if await conn.fetchval("SELECT to_regclass($1)", relation) is not None:
        return
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", relation)
        await conn.execute(CREATE_STAGE.format(relation=relation, columns=columns))


async def apply_settings(conn: asyncpg.Connection) -> None:
    for statement in APPLY_SETTINGS:
        await conn.execute(statement)
