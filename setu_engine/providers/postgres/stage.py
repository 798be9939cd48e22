"""Staging tables of resumable loads in PostgreSQL
(setu_engine/staged/resumable.py): their creation with the marker that
registers them, their drop, the search for abandoned ones, and the pruning
of markers nothing reads any more. `markers` is the quoted marker table."""

from __future__ import annotations

from datetime import timedelta

import asyncpg

from setu_engine.staged.markers import LoadMarker

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


# The marker that registers a staging table (part `stage`): written with
# the table, its loaded_at the table's creation time.
REGISTER = """
INSERT INTO {markers} (run_id, stream, part) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING
"""

# Other runs' staging tables with no marker of their run and stream written
# for longer than $2 (an interval). $1 the loading run.
STALE = """
SELECT s.run_id::text AS run_id, s.stream, s.part FROM {markers} s
WHERE s.part = 'stage' AND s.run_id <> $1::uuid
  AND (SELECT max(m.loaded_at) FROM {markers} m
       WHERE m.run_id = s.run_id AND m.stream = s.stream) < now() - $2::interval
ORDER BY s.loaded_at
"""

# A staging table's markers: its registration and its parts' ($1 run, $2 stream).
FORGET_STAGE = "DELETE FROM {markers} WHERE run_id = $1 AND stream = $2 AND part <> ''"
UNREGISTER = "DELETE FROM {markers} WHERE run_id = $1 AND stream = $2 AND part = 'stage'"

# The tables of that name, in whichever schema the load landed.
RELATIONS = """
SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = $1 AND c.relkind = 'r'
"""

# In the apply's transaction, for the stream $1 of run $2: other runs' part
# markers whose staging table is gone (nothing resumes from them), and
# whole-stream markers beyond the newest $3 (a retry after a commit is of a
# recent run). A registered staging table keeps its parts' markers.
PRUNE = """
DELETE FROM {markers} m
WHERE m.stream = $1 AND m.run_id <> $2::uuid AND m.part <> 'stage'
  AND CASE WHEN m.part <> '' THEN NOT EXISTS (
          SELECT 1 FROM {markers} s
          WHERE s.run_id = m.run_id AND s.stream = m.stream AND s.part = 'stage')
      ELSE m.run_id NOT IN (
          SELECT k.run_id FROM {markers} k WHERE k.stream = $1 AND k.part = ''
          ORDER BY k.loaded_at DESC, k.run_id LIMIT $3)
      END
"""


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _key(marker: LoadMarker) -> tuple[str, str, str]:
    return (marker.run_id, marker.stream, marker.part)


async def create(
    conn: asyncpg.Connection, relation: str, columns: str, markers: str, marker: LoadMarker
) -> None:
    """The staging table, created if missing with its registering marker:
    apart from any part and under a lock, so two attempts cannot race."""
    if await conn.fetchval("SELECT to_regclass($1)", relation) is not None:
        return
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", relation)
        await conn.execute(CREATE_STAGE.format(relation=relation, columns=columns))
        said = f"Setu staging table of run {marker.run_id}, stream {marker.stream}"
        await conn.execute(f"COMMENT ON TABLE {relation} IS {_literal(said)}")
        await conn.execute(REGISTER.format(markers=markers), *_key(marker))


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


async def drop(conn: asyncpg.Connection, markers: str, stage: str, marker: LoadMarker) -> None:
    """The staging table and its markers (but the whole-stream one), at once."""
    async with conn.transaction():
        await conn.execute(FORGET_STAGE.format(markers=markers), marker.run_id, marker.stream)
        for (schema,) in await conn.fetch(RELATIONS, stage):
            await conn.execute(f"DROP TABLE IF EXISTS {_quote(schema)}.{_quote(stage)}")


async def stale(
    conn: asyncpg.Connection, markers: str, run_id: str, idle: timedelta
) -> list[LoadMarker]:
    found = await conn.fetch(STALE.format(markers=markers), run_id, idle)
    return [LoadMarker(r["run_id"], r["stream"], r["part"]) for r in found]


async def applied(conn: asyncpg.Connection, markers: str, marker: LoadMarker, keep: int) -> None:
    """In the apply's transaction: the run's staging table is gone, so is
    its registration; the markers nothing reads any more are pruned."""
    await conn.execute(UNREGISTER.format(markers=markers), marker.run_id, marker.stream)
    await conn.execute(PRUNE.format(markers=markers), marker.stream, marker.run_id, keep)


async def apply_settings(conn: asyncpg.Connection) -> None:
    for statement in APPLY_SETTINGS:
        await conn.execute(statement)
