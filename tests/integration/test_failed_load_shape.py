"""A failed load changes nothing in its destination, its shape included
(docs/flows.md, "A failed run changes nothing"): the schema a load creates
and the columns it adds under `schema_evolution: add_columns` are made in
the load's own transaction (the apply's, for a resumable load), so a load
that fails after its first part leaves the destination's schema as it was,
in PostgreSQL and in SQLite; and one that succeeds makes them, says so, and
lands every row."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_engine.errors import PermanentError
from setu_engine.providers import get_provider
from setu_engine.providers.base import Connector
from setu_engine.staged.markers import LoadIdentity
from setu_engine.staged.resumable import ResumePolicy
from setu_engine.staged.staging import Manifest
from tests.databases import postgres_config
from tests.integration import test_resumable_loads
from tests.integration.test_resumable_loads import (
    ALWAYS,
    NEVER,
    ROWS,
    Reporter,
    Stop,
    fetch,
    load,
    sqlite_destination,
    sqlite_rows,
    staged,
)

# That module's source (1,000 rows in PostgreSQL) and scratch destination.
source = test_resumable_loads.source
destination = test_resumable_loads.destination

# Resumable (part by part through a staging table, then one apply) and in
# one transaction.
PATHS = pytest.mark.parametrize("resume", [ALWAYS, NEVER], ids=["resumable", "one-transaction"])
# Part 2 (ids 101 to 200) breaks it: the load fails after its first part.
CHECKED = "CHECK (id < 150)"


async def columns_of(url: str, schema: str, table: str) -> list[str]:
    rows = await fetch(
        url,
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position",
        schema,
        table,
    )
    return [r[0] for r in rows]


async def failed_after_a_part(
    dst: Connector, manifest: Manifest, tmp_path: Path, resume: ResumePolicy
) -> Reporter:
    """Loads `manifest` into `dst` (closed after), which CHECKED fails after
    its first part; what the load reported."""
    reporter = Reporter()
    try:
        with pytest.raises(PermanentError, match="constraint"):
            await load(
                dst, manifest, tmp_path, LoadIdentity(str(uuid.uuid4())), reporter, resume=resume
            )
    finally:
        await dst.close()
    assert reporter.parts >= 1, "the load failed after its first part"
    return reporter


def sqlite_columns(path: Path, table: str) -> list[str]:
    return [r[0] for r in sqlite_rows(path, f"SELECT name FROM pragma_table_info('{table}')")]


@PATHS
async def test_postgres_a_load_failing_after_its_first_part_adds_no_column(
    source: str, destination: str, tmp_path: Path, resume: ResumePolicy
) -> None:
    conn = await asyncpg.connect(destination)
    await conn.execute(f"CREATE TABLE events (id integer PRIMARY KEY {CHECKED})")
    await conn.close()
    manifest = await staged(source, tmp_path)
    assert len(manifest.streams[0].parts) > 2
    dst = await get_provider("postgres").connect(postgres_config(destination))
    reporter = await failed_after_a_part(dst, manifest, tmp_path, resume)
    assert await columns_of(destination, "public", "events") == ["id"]
    assert await fetch(destination, "SELECT count(*) FROM events") == [(0,)]
    assert not any("Added column" in n for n in reporter.notes), reporter.notes


@PATHS
async def test_postgres_a_load_failing_after_its_first_part_creates_no_schema_and_its_retry_does(
    source: str, destination: str, tmp_path: Path, resume: ResumePolicy
) -> None:
    manifest = await staged(source, tmp_path)
    into_edge: dict[str, Any] = {"destination": {"events": "edge.events"}}
    run = LoadIdentity(str(uuid.uuid4()))
    dst = await get_provider("postgres").connect(postgres_config(destination))
    try:
        stopped = Reporter(stop_after_parts=1)
        with pytest.raises(Stop):
            await load(dst, manifest, tmp_path, run, stopped, resume=resume, spec=into_edge)
        # The staging table of a resumable load waited in the connection's
        # schema meanwhile: the target's is made by the apply, with the rows.
        assert await fetch(destination, "SELECT to_regnamespace('edge')") == [(None,)]
        assert not any("Created schema" in n for n in stopped.notes), stopped.notes

        again = Reporter()
        await load(dst, manifest, tmp_path, run, again, resume=resume, spec=into_edge)
    finally:
        await dst.close()
    landed = await fetch(destination, "SELECT count(*), count(DISTINCT id) FROM edge.events")
    assert landed == [(ROWS, ROWS)]
    assert "Created schema edge in the destination" in again.notes, again.notes
    staging = "SELECT count(*) FROM pg_class WHERE relname LIKE '\\_setu\\_stage\\_%'"
    assert await fetch(destination, staging) == [(0,)]


@PATHS
async def test_sqlite_a_load_failing_after_its_first_part_adds_no_column(
    source: str, tmp_path: Path, resume: ResumePolicy
) -> None:
    path = tmp_path / "destination.db"
    with sqlite3.connect(path) as conn:
        conn.execute(f"CREATE TABLE events (id INTEGER PRIMARY KEY {CHECKED})")
    conn.close()
    manifest = await staged(source, tmp_path)
    dst = await sqlite_destination(path)
    reporter = await failed_after_a_part(dst, manifest, tmp_path, resume)
    assert sqlite_columns(path, "events") == ["id"]
    assert sqlite_rows(path, "SELECT count(*) FROM events") == [(0,)]
    assert not any("Added column" in n for n in reporter.notes), reporter.notes
