"""A staged extract resumes after the parts an earlier attempt stored
(setu_engine/movement/transfer.py, docs/flows.md "An extract resumes at the first part not
stored"): a SQLite table (a real file) staged into a local blob folder, then
staged again from the books the first attempt kept. The provider's own
count says what each attempt read of the source."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from setu_engine.movement import transfer
from setu_engine.providers import get_provider
from setu_engine.providers.base import Connector, CountsRows, ResumableRows
from setu_engine.staged import staging
from setu_engine.staged.blob import LocalBlobStore
from setu_engine.staged.staging import StoredPart
from tests.databases import postgres_config, scratch_database

ROWS = 1_000
PART_ROWS = 100  # 10 parts


@dataclass
class Books:
    """A reporter that keeps the run's books as a runtime would."""

    stored_parts: list[StoredPart] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extracted_rows: int = 0

    async def extracted(self, stream: str, rows: int) -> None:
        self.extracted_rows += rows

    async def loaded(self, stream: str, rows: int) -> None:
        pass

    def stored(self, part: StoredPart) -> None:
        self.stored_parts.append(part)

    async def note(self, stream: str, message: str) -> None:
        self.notes.append(message)


async def sqlite_table(folder: Path) -> Connector:
    path = folder / "events.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, body TEXT)")
        conn.execute(
            "WITH RECURSIVE i(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM i WHERE v < ?) "
            "INSERT INTO events SELECT v, 'r' || v FROM i",
            (ROWS,),
        )
    conn.close()
    return await get_provider("sqlite").connect({"path": str(path)})


def read_so_far(source: Connector) -> int:
    assert isinstance(source, CountsRows)
    return source.rows_read


async def staged_ids(blob: LocalBlobStore, manifest: staging.Manifest) -> list[int]:
    from setu_engine.staged import pgcopy

    ids: list[int] = []
    stream = manifest.streams[0]
    async for part in staging.read_parts(blob, "run/", stream):
        ids += [row[0] for row in pgcopy.decode(stream.stream.columns, part.data)]
    return ids


async def test_a_second_attempt_reads_only_the_rows_after_the_parts_the_first_stored(
    tmp_path: Path,
) -> None:
    source = await sqlite_table(tmp_path)
    blob = LocalBlobStore(tmp_path / "blob")
    streams = await source.discover()
    first = Books()
    await transfer.stage(source, streams, blob, "run/", first, PART_ROWS)
    assert read_so_far(source) == ROWS
    assert [p.number for p in first.stored_parts] == list(range(10))
    assert first.stored_parts[5].position == "600"

    # The first attempt stopped after storing 6 parts; the next builds on them.
    again = Books()
    before = read_so_far(source)
    manifest = await transfer.stage(
        source, streams, blob, "run/", again, PART_ROWS, earlier=first.stored_parts[:6]
    )
    print(f"rows read by the resumed attempt: {read_so_far(source) - before} of {ROWS}")
    assert read_so_far(source) - before == 400
    assert [p.number for p in again.stored_parts] == [6, 7, 8, 9]
    assert again.extracted_rows == ROWS  # the run's count includes the stored parts
    assert any("resuming the extract at part 6" in n for n in again.notes), again.notes
    assert manifest.rows == ROWS
    assert await staged_ids(blob, manifest) == list(range(1, ROWS + 1))
    await source.close()


async def test_a_recorded_part_not_in_blob_as_recorded_is_read_again(tmp_path: Path) -> None:
    source = await sqlite_table(tmp_path)
    blob = LocalBlobStore(tmp_path / "blob")
    streams = await source.discover()
    first = Books()
    await transfer.stage(source, streams, blob, "run/", first, PART_ROWS)
    # Part 3 changed after it was recorded: parts 0-2 are kept, the rest read again.
    await blob.put("run/" + first.stored_parts[3].part.path, b"not the part")
    again = Books()
    before = read_so_far(source)
    manifest = await transfer.stage(
        source, streams, blob, "run/", again, PART_ROWS, earlier=first.stored_parts[:6]
    )
    assert read_so_far(source) - before == 700
    assert any("part 3 is not as recorded" in n for n in again.notes), again.notes
    assert await staged_ids(blob, manifest) == list(range(1, ROWS + 1))
    await source.close()


async def test_a_postgres_table_read_resumes_at_the_ctid_range_after_the_stored_parts(
    pg_server_url: str, tmp_path: Path
) -> None:
    rows = 10_000
    async with scratch_database(pg_server_url) as url:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(
                "CREATE TABLE events AS SELECT i AS id, md5(i::text) AS body "
                "FROM generate_series(1, $1) i",
                rows,
            )
            await conn.execute("ANALYZE events")
        finally:
            await conn.close()
        source = await get_provider("postgres").connect(postgres_config(url))
        try:
            blob = LocalBlobStore(tmp_path / "blob")
            streams = await source.discover()
            first = Books()
            await transfer.stage(source, streams, blob, "run/", first, 500)
            assert read_so_far(source) == rows and len(first.stored_parts) > 6
            again = Books()
            before = read_so_far(source)
            kept = first.stored_parts[:6]
            manifest = await transfer.stage(source, streams, blob, "run/", again, 500, earlier=kept)
            read = read_so_far(source) - before
            print(f"rows read by the resumed attempt: {read} of {rows}")
            assert read == rows - sum(p.part.rows for p in kept)
            assert sorted(await staged_ids(blob, manifest)) == list(range(1, rows + 1))
        finally:
            await source.close()


async def test_a_view_is_staged_whole_not_by_rowid_ranges(tmp_path: Path) -> None:
    # A view answers `SELECT _rowid_` with NULL on every row: a range read of
    # it matched nothing, and the run staged 0 rows and succeeded.
    path = tmp_path / "events.db"
    await (await sqlite_table(tmp_path)).close()  # the file, with its 1,000 rows
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE VIEW events_view AS SELECT id, body FROM events")
        conn.execute("CREATE TABLE keyed (id INTEGER PRIMARY KEY, body TEXT) WITHOUT ROWID")
    conn.close()
    source = await get_provider("sqlite").connect({"path": str(path)})
    streams = {s.name: s for s in await source.discover()}
    resumable = source
    assert isinstance(resumable, ResumableRows)
    assert await resumable.resumes(streams["events"])
    assert not await resumable.resumes(streams["events_view"])
    assert not await resumable.resumes(streams["keyed"])

    blob = LocalBlobStore(tmp_path / "blob")
    books = Books()
    manifest = await transfer.stage(
        source, [streams["events_view"]], blob, "run/", books, PART_ROWS
    )
    assert manifest.rows == ROWS and books.extracted_rows == ROWS
    assert await staged_ids(blob, manifest) == list(range(1, ROWS + 1))
    # Whole: no part has a position to resume at, so a retry reads it all again.
    assert books.stored_parts and not any(p.position for p in books.stored_parts)
    await source.close()
