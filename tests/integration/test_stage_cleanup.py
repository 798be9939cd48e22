"""What resumable loads leave behind in a destination (docs/flows.md,
"Resumable loads"), in PostgreSQL and SQLite:

- a load cancelled, or failed for good, drops its staging table and its
  part markers (a load stopped by anything a retry may get past keeps them);
- a later staged load of another run (resumable or not) drops the staging
  tables that other runs left idle for longer than the policy's
  `stale_after`, with their part markers, so a run that comes back after
  all copies every part again;
- every load prunes, in its own transaction, the markers nothing reads:
  whole-stream markers beyond the newest KEEP_MARKERS of the stream, and
  other runs' part markers whose staging table is gone."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_engine.kinds import WriteMode
from setu_engine.providers import get_provider
from setu_engine.providers.base import Connector
from setu_engine.providers.postgres.connector import MARKERS_DDL as PG_MARKERS_DDL
from setu_engine.providers.sqlite.connector import MARKERS_DDL as SQLITE_MARKERS_DDL
from setu_engine.staged.markers import KEEP_MARKERS, LoadIdentity
from setu_engine.staged.resumable import ResumePolicy, stage_table
from setu_engine.staged.staging import Manifest
from tests.databases import postgres_config
from tests.integration.test_resumable_loads import (
    ALWAYS,
    NEVER,
    ROWS,
    Reporter,
    Stop,
    destination,
    load,
    source,
    staged,
)

__all__ = ["destination", "source"]  # fixtures, used by name

STREAM = "public.events"
IDLE_NOW = ResumePolicy(min_bytes=0, stale_after=timedelta(0))
# The same, for a load that goes in one transaction itself.
IDLE_NOW_WHOLE = ResumePolicy(min_bytes=2**62, stale_after=timedelta(0))
OVERWRITE = WriteMode.OVERWRITE


class Cancel(Exception):
    """What a reporter raises when the job asked to stop (as TaskCancelled)."""

    cancels = True


class Refused(Exception):
    """A failure no retry can fix (as a provider's PermanentError)."""

    retryable = False


@dataclass
class Place:
    """A destination of one kind, and how the test reads it."""

    connect: Callable[[], Awaitable[Connector]]
    query: Callable[[str], Awaitable[list[tuple[Any, ...]]]]
    markers_ddl: str

    async def table_rows(self, table: str) -> int | None:
        """Rows of a table, None when there is no such table."""
        try:
            found = await self.query(f'SELECT count(*) FROM "{table}"')
        except (asyncpg.UndefinedTableError, sqlite3.OperationalError):
            return None
        return int(found[0][0])

    async def parts(self, run: str, stream: str = STREAM) -> list[str]:
        """The run's markers of the stream, by part (`stage`: its registration)."""
        found = await self.query(
            f"SELECT part FROM _setu_loads WHERE run_id = '{run}' AND stream = '{stream}' "
            "ORDER BY part"
        )
        return [str(p) for (p,) in found]


@pytest.fixture(params=["postgres", "sqlite"])
async def place(request: pytest.FixtureRequest, destination: str, tmp_path: Path) -> Place:
    if request.param == "postgres":

        async def pg_query(sql: str) -> list[tuple[Any, ...]]:
            conn = await asyncpg.connect(destination)
            try:
                return [tuple(r) for r in await conn.fetch(sql)]
            finally:
                await conn.close()

        return Place(
            lambda: get_provider("postgres").connect(postgres_config(destination)),
            pg_query,
            PG_MARKERS_DDL.format(table="_setu_loads"),
        )
    path = tmp_path / "dst.db"

    async def sqlite_query(sql: str) -> list[tuple[Any, ...]]:
        with sqlite3.connect(path) as db:
            return list(db.execute(sql).fetchall())

    return Place(
        lambda: get_provider("sqlite").connect({"path": str(path), "create": True}),
        sqlite_query,
        SQLITE_MARKERS_DDL,
    )


@pytest.fixture
async def manifest(source: str, tmp_path: Path) -> AsyncIterator[Manifest]:
    yield await staged(source, tmp_path / "blob")


async def load_once(
    place: Place,
    manifest: Manifest,
    tmp_path: Path,
    run: str,
    reporter: Reporter | None = None,
    resume: ResumePolicy = ALWAYS,
    mode: WriteMode = WriteMode.APPEND,
) -> Reporter:
    reporter = reporter or Reporter()
    dst = await place.connect()
    try:
        identity = LoadIdentity(run)
        await load(dst, manifest, tmp_path / "blob", identity, reporter, mode=mode, resume=resume)
    finally:
        await dst.close()
    return reporter


def new_run() -> str:
    return str(uuid.uuid4())


@pytest.mark.parametrize(
    ("stopped_by", "dropped"), [(Cancel, True), (Refused, True), (Stop, False)]
)
async def test_a_load_stopped_for_good_drops_its_staging_table(
    place: Place, manifest: Manifest, tmp_path: Path, stopped_by: type[Exception], dropped: bool
) -> None:
    run = new_run()
    stage = stage_table(run, STREAM)
    parts = manifest.streams[0].parts

    class Stopping(Reporter):
        async def loaded(self, stream: str, rows: int) -> None:
            self.parts += 1
            if self.parts == 3:
                raise stopped_by("stop here")

    with pytest.raises(stopped_by):
        await load_once(place, manifest, tmp_path, run, Stopping())

    assert await place.table_rows("events") in (None, 0)
    if dropped:  # no attempt follows: nothing would ever read it again
        assert await place.table_rows(stage) is None
        assert await place.parts(run) == []
    else:  # a retry resumes from it
        assert await place.table_rows(stage) == sum(p.rows for p in parts[:3])
        assert await place.parts(run) == ["part-00000", "part-00001", "part-00002", "stage"]


@pytest.mark.parametrize("later", [IDLE_NOW, IDLE_NOW_WHOLE], ids=["resumable", "one-transaction"])
async def test_a_later_load_drops_the_staging_tables_other_runs_left_idle(
    place: Place, manifest: Manifest, tmp_path: Path, later: ResumePolicy
) -> None:
    parts = manifest.streams[0].parts
    gone = new_run()  # its process died for good after three parts
    with pytest.raises(Stop):
        await load_once(
            place, manifest, tmp_path, gone, Reporter(stop_after_parts=3), mode=OVERWRITE
        )
    abandoned = stage_table(gone, STREAM)

    # A run soon after leaves it alone: it may be resumed yet. (Every run
    # overwrites: the rows of each land, and only its.)
    await load_once(place, manifest, tmp_path, new_run(), mode=OVERWRITE)
    assert await place.table_rows(abandoned) == sum(p.rows for p in parts[:3])
    assert len(await place.parts(gone)) == 4

    # Idle for longer than the policy allows: dropped, with its part markers.
    cleaner = await load_once(place, manifest, tmp_path, new_run(), resume=later, mode=OVERWRITE)
    assert await place.table_rows(abandoned) is None
    assert await place.parts(gone) == []
    assert any(f"Dropped staging table {abandoned} of run {gone}" in n for n in cleaner.notes)
    assert await place.table_rows("events") == ROWS

    # Its run comes back after all: every part is copied again, none trusted.
    back = await load_once(place, manifest, tmp_path, gone, mode=OVERWRITE)
    assert any(f"Loading {len(parts)} parts" in n for n in back.notes), back.notes
    assert await place.table_rows("events") == ROWS
    whole = await place.query(f"SELECT rows FROM _setu_loads WHERE run_id = '{gone}' AND part = ''")
    assert [int(r) for (r,) in whole] == [ROWS]


@pytest.mark.parametrize("resume", [ALWAYS, NEVER], ids=["resumable", "one-transaction"])
async def test_a_load_prunes_the_markers_nothing_reads(
    place: Place, manifest: Manifest, tmp_path: Path, resume: ResumePolicy
) -> None:
    old = [new_run() for _ in range(KEEP_MARKERS + 8)]
    dead, live, run = new_run(), new_run(), new_run()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    seeded = [(r, STREAM, "", start + timedelta(hours=i)) for i, r in enumerate(old)]
    seeded += [(r, "public.other", "", start) for r in old]  # another stream's
    # Parts of a run whose staging table is gone, and of one whose is there.
    seeded += [(dead, STREAM, "part-00000", start), (dead, STREAM, "part-00001", start)]
    # (Within the hour: a staging table idle for a day would be dropped.)
    recent = datetime.now(UTC) - timedelta(hours=1)
    seeded += [(live, STREAM, "part-00000", recent), (live, STREAM, "stage", recent)]
    await place.query(place.markers_ddl)
    for r, stream, part, at in seeded:
        stamp = at.strftime("%Y-%m-%dT%H:%M:%S.000Z")
        await place.query(
            "INSERT INTO _setu_loads (run_id, stream, part, loaded_at, rows) "
            f"VALUES ('{r}', '{stream}', '{part}', '{stamp}', 1)"
        )

    await load_once(place, manifest, tmp_path, run, resume=resume)

    kept = await place.query(
        f"SELECT run_id FROM _setu_loads WHERE stream = '{STREAM}' AND part = '' "
        "AND run_id <> '" + run + "'"
    )
    # The newest whole markers (this run's among them), the rest pruned.
    assert sorted(str(r) for (r,) in kept) == sorted(old[-(KEEP_MARKERS - 1) :])
    assert await place.parts(dead) == []
    assert await place.parts(live) == ["part-00000", "stage"]
    assert len(await place.parts(old[0], "public.other")) == 1
    own = await place.parts(run)
    parts = len(manifest.streams[0].parts)
    if resume is ALWAYS:  # the run's own part markers stay; its staging table went
        assert own == [""] + [f"part-{i:05d}" for i in range(parts)]
    else:
        assert own == [""]
