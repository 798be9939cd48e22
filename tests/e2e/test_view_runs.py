"""A staged cloud run of a view lands every row of it (docs/flows.md, "An extract resumes"):
a view has no rowid (SQLite answers `SELECT _rowid_` on it with NULL) and no
ctid (PostgreSQL), so its read is whole, not in resumable ranges. Through the
in-process server, its cloud worker and the local blob store; the run is
small but staged, as a view's row estimate is 0 ("cannot tell")."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_client import SetuClient
from setu_client._proto.setu.v1 import common_pb2
from setu_server.store import jobs
from tests.databases import postgres_config

S = common_pb2
ROWS = 1_000


def sqlite_view(folder: Path) -> tuple[str, dict[str, Any]]:
    path = folder / "events.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, body TEXT)")
        conn.executemany(
            "INSERT INTO events VALUES (?, ?)", [(i, f"row {i}") for i in range(1, ROWS + 1)]
        )
        conn.execute("CREATE VIEW events_view AS SELECT id, body FROM events")
    conn.close()
    return "sqlite", {"path": str(path)}


async def postgres_view(url: str) -> tuple[str, dict[str, Any]]:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "CREATE TABLE events AS SELECT i::bigint AS id, 'row ' || i AS body "
            "FROM generate_series(1, $1) i",
            ROWS,
        )
        await conn.execute("CREATE VIEW events_view AS SELECT id, body FROM events")
        await conn.execute("ANALYZE events")
    finally:
        await conn.close()
    return "postgres", postgres_config(url)


@pytest.mark.server(direct_max_rows=10, batch_rows=100)  # staged, in 10 parts
@pytest.mark.parametrize("provider", ["sqlite", "postgres"])
async def test_a_staged_cloud_run_of_a_view_lands_all_its_rows(
    client: SetuClient,
    pool: asyncpg.Pool,
    databases: tuple[str, str],
    tmp_path: Path,
    provider: str,
) -> None:
    source_url, destination_url = databases
    if provider == "sqlite":
        source = sqlite_view(tmp_path)
    else:
        source = await postgres_view(source_url)
    src = await client.create_connection("source", *source)
    dst = await client.create_connection(
        "destination", "postgres", postgres_config(destination_url)
    )
    pipeline = await client.create_pipeline("events view", src.id, dst.id, ["events_view"])
    job = await client.submit_run(pipeline.id)
    await client.wait_for_job(job.id)
    done = await client.get_job(job.id)

    assert done.state == S.JOB_STATE_SUCCEEDED, done.error_message
    timeline = [
        e.message for e in await jobs.list_job_events(pool, uuid.UUID(job.id), after=0, limit=100)
    ]
    assert f"Staged {ROWS} rows of 1 stream(s) in 10 part(s)" in timeline, timeline
    conn = await asyncpg.connect(destination_url)
    try:
        landed = [r["id"] for r in await conn.fetch("SELECT id FROM events_view ORDER BY id")]
    finally:
        await conn.close()
    assert landed == list(range(1, ROWS + 1))
    outputs = await client.job_outputs(job.id)
    assert [(o.rows_extracted, o.rows_loaded) for o in outputs.streams] == [(ROWS, ROWS)]
