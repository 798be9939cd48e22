"""Data fidelity through the real server, worker and SDK: a bad value fails
its run once, naming stream, column, row and value, and is not retried; an
infinity survives a staged and a direct run into JSON Lines.
(tests/integration/test_fidelity.py covers every provider pair through the
engine.)"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from google.protobuf.json_format import MessageToDict

from setu_client import SetuClient
from setu_client._proto.setu.v1 import common_pb2
from tests.databases import postgres_config, scratch_database

S = common_pb2

PATHS = {"staged": {"direct_max_rows": 0}, "direct": {"direct_max_rows": 10_000_000}}
PHASES = {"staged": S.PHASE_EXTRACT, "direct": S.PHASE_DIRECT}


async def run(
    client: SetuClient, source: tuple[str, dict[str, Any]], destination: tuple[str, dict[str, Any]]
) -> Any:
    src = await client.create_connection("source", *source)
    dst = await client.create_connection("destination", *destination)
    pipeline = await client.create_pipeline("fidelity", src.id, dst.id, write_mode="overwrite")
    job = await client.submit_run(pipeline.id)
    await client.wait_for_job(job.id)
    return await client.get_job(job.id)


async def task_attempts(database_url: str, job_id: str) -> list[tuple[str, int]]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT state, attempt FROM task WHERE job_id = $1 ORDER BY created_at", job_id
        )
    finally:
        await conn.close()
    return [(r["state"], r["attempt"]) for r in rows]


def notes_with_a_nul(path: Path) -> tuple[str, dict[str, Any]]:
    """A SQLite table whose third row holds text PostgreSQL cannot store."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    db.executemany(
        "INSERT INTO notes VALUES (?, ?)", [(1, "fine"), (2, "also fine"), (3, "cut\x00here")]
    )
    db.commit()
    db.close()
    return "sqlite", {"path": str(path)}


@pytest.mark.parametrize("path", list(PATHS))
async def test_a_bad_value_fails_the_run_once_naming_stream_column_row_and_value(
    client_for: Any, database_url: str, pg_server_url: str, tmp_path: Path, path: str
) -> None:
    _, client = await client_for(**PATHS[path])
    async with scratch_database(pg_server_url) as destination_url:
        job = await run(
            client,
            notes_with_a_nul(tmp_path / "notes.db"),
            ("postgres", postgres_config(destination_url)),
        )
        conn = await asyncpg.connect(destination_url)
        try:
            landed = await conn.fetchval("SELECT to_regclass('notes') IS NOT NULL")
            rows = await conn.fetchval("SELECT count(*) FROM notes") if landed else 0
        finally:
            await conn.close()

    assert job.state == S.JOB_STATE_FAILED
    assert job.phase == PHASES[path]
    message = job.error_message
    assert "stream 'notes', column 'body', row 3" in message, message
    assert "cannot hold the NUL character" in message
    assert "'cut\\x00here'" in message  # an excerpt of the value
    # Permanent: the task failed on its first attempt, not after three.
    assert await task_attempts(database_url, job.id) == [("failed", 1)]
    assert rows == 0  # nothing of the stream landed


@pytest.mark.parametrize("path", list(PATHS))
async def test_an_infinity_reaches_json_lines_as_infinity(
    client_for: Any, pg_server_url: str, tmp_path: Path, path: str
) -> None:
    _, client = await client_for(**PATHS[path])
    async with scratch_database(pg_server_url) as source_url:
        conn = await asyncpg.connect(source_url)
        try:
            await conn.execute(
                "CREATE TABLE events (id int PRIMARY KEY, at timestamptz, day date, r real);"
                "INSERT INTO events VALUES (1, 'infinity', '-infinity', 0.01), "
                "(2, '2024-01-01 00:00:00.000001+00', '2024-01-01', 'NaN')"
            )
        finally:
            await conn.close()
        folder = tmp_path / "out"
        folder.mkdir()
        job = await run(
            client,
            ("postgres", postgres_config(source_url)),
            ("file", {"url": str(folder), "format": "jsonl"}),
        )

    assert job.state == S.JOB_STATE_SUCCEEDED, job.error_message
    lines = (folder / "events.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"id": 1, "at": "infinity", "day": "-infinity", "r": 0.01},
        {"id": 2, "at": "2024-01-01T00:00:00.000001+00:00", "day": "2024-01-01", "r": "NaN"},
    ]
    assert '"r":0.01}' in lines[0]  # float4's digits, not 0.009999999776482582


async def test_a_preview_spells_values_as_json_lines_does(
    client_for: Any, pg_server_url: str, tmp_path: Path
) -> None:
    """A preview shows a real with its float4's digits, JSON's null as null
    and a json column's SQL NULL as no key, an infinity as 'infinity': the
    row the JSON Lines file holds (docs/data-types.md)."""
    _, client = await client_for(**PATHS["direct"])
    async with scratch_database(pg_server_url) as source_url:
        conn = await asyncpg.connect(source_url)
        try:
            await conn.execute(
                "CREATE TABLE docs (id int PRIMARY KEY, r real, j jsonb, day date);"
                "INSERT INTO docs VALUES (1, 0.01, 'null', 'infinity'), "
                """(2, 'NaN', NULL, '2024-01-01'), (3, 3.4028235e38, '{"a": null}', NULL)"""
            )
        finally:
            await conn.close()
        folder = tmp_path / "out"
        folder.mkdir()
        source = await client.create_connection(
            "previewed", "postgres", postgres_config(source_url)
        )
        preview = await client.preview_stream(source.id, "public.docs")
        destination = ("file", {"url": str(folder), "format": "jsonl"})
        job = await run(client, ("postgres", postgres_config(source_url)), destination)

    assert job.state == S.JOB_STATE_SUCCEEDED, job.error_message
    lines = [json.loads(line) for line in (folder / "docs.jsonl").read_text().splitlines()]
    shown = sorted((MessageToDict(row) for row in preview.rows), key=lambda row: row["id"])
    assert shown == lines
    assert shown[0] == {"id": 1, "r": 0.01, "j": None, "day": "infinity"}
    assert "j" not in shown[1]  # SQL NULL, not JSON's null
