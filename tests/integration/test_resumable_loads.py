"""Resumable loads (setu_engine/staged/resumable.py) into real databases: a
staged stream of several parts goes part by part into a staging table, each
part with its marker, and lands in the target in one transaction; a load
stopped between parts resumes at the first part without a marker; every
write mode lands what a one-transaction load lands; a chain with a blocking
operator loads in one piece."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_engine.kinds import RowChanges, WriteMode
from setu_engine.movement import transfer
from setu_engine.operators.chain import parse_spec
from setu_engine.providers import get_provider
from setu_engine.providers.base import Connector
from setu_engine.staged.blob import LocalBlobStore
from setu_engine.staged.markers import LoadIdentity
from setu_engine.staged.resumable import ResumePolicy, stage_table
from setu_engine.staged.staging import Manifest
from tests.databases import postgres_config, scratch_database

ROWS = 1_000
PART_ROWS = 100  # so ten parts
ALWAYS = ResumePolicy(min_bytes=0)
NEVER = ResumePolicy(min_bytes=2**62)
SPEC = {"primary_key": {"events": ["id"]}}


class Stop(Exception):
    """Raised by the reporter after a number of parts: a load cut short."""


@dataclass
class Reporter:
    stop_after_parts: int | None = None
    parts: int = 0
    notes: list[str] = field(default_factory=list)
    # What readers of the target saw after every part.
    seen: list[int] = field(default_factory=list)
    watch: Any = None

    async def extracted(self, stream: str, rows: int) -> None:
        pass

    async def loaded(self, stream: str, rows: int) -> None:
        self.parts += 1
        if self.watch is not None:
            self.seen.append(await self.watch())
        if self.stop_after_parts is not None and self.parts >= self.stop_after_parts:
            raise Stop

    async def note(self, stream: str, message: str) -> None:
        self.notes.append(message)


@pytest.fixture
async def source(pg_server_url: str) -> AsyncIterator[str]:
    async with scratch_database(pg_server_url) as url:
        conn = await asyncpg.connect(url)
        await conn.execute(
            "CREATE TABLE events (id integer PRIMARY KEY, body text);"
            "INSERT INTO events SELECT i, md5(i::text) FROM generate_series(1, 1000) i"
        )
        await conn.close()
        yield url


@pytest.fixture
async def destination(pg_server_url: str) -> AsyncIterator[str]:
    async with scratch_database(pg_server_url) as url:
        yield url


async def staged(source: str, blob: Path) -> Manifest:
    src = await get_provider("postgres").connect(postgres_config(source))
    try:
        streams = transfer.select_streams(await src.discover(), ["events"])
        store = LocalBlobStore(blob)
        return await transfer.stage(src, streams, store, "run/", Reporter(), PART_ROWS)
    finally:
        await src.close()


async def load(
    destination: Connector,
    manifest: Manifest,
    blob: Path,
    run: LoadIdentity,
    reporter: Reporter,
    *,
    mode: WriteMode = WriteMode.APPEND,
    resume: ResumePolicy = ALWAYS,
    spec: dict[str, Any] | None = None,
) -> list[transfer.StreamTotals]:
    return await transfer.load(
        destination,
        manifest,
        LocalBlobStore(blob),
        "run/",
        parse_spec(spec or SPEC),
        mode,
        reporter,
        identity=run,
        resume=resume,
    )


async def fetch(url: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(url)
    try:
        return [tuple(r) for r in await conn.fetch(sql, *args)]
    finally:
        await conn.close()


async def count_or_absent(url: str, table: str) -> int | None:
    conn = await asyncpg.connect(url)
    try:
        if await conn.fetchval("SELECT to_regclass($1)", f'public."{table}"') is None:
            return None
        count: int = await conn.fetchval(f'SELECT count(*) FROM public."{table}"')
        return count
    finally:
        await conn.close()


async def part_markers(url: str, run: LoadIdentity) -> list[str]:
    """The run's load markers, but the one registering its staging table."""
    rows = await fetch(
        url,
        "SELECT part FROM _setu_loads WHERE run_id = $1 AND part <> 'stage' ORDER BY part",
        run.run_id,
    )
    return [r[0] for r in rows]


async def test_a_load_stopped_between_parts_resumes_at_the_first_part_without_a_marker(
    source: str, destination: str, tmp_path: Path
) -> None:
    manifest = await staged(source, tmp_path)
    parts = manifest.streams[0].parts
    assert len(parts) > 4
    run = LoadIdentity(str(uuid.uuid4()))
    stage = stage_table(run.run_id, "public.events")
    dst = await get_provider("postgres").connect(postgres_config(destination))
    try:
        first = Reporter(stop_after_parts=3)
        with pytest.raises(Stop):
            await load(dst, manifest, tmp_path, run, first)
        # Three parts are in the staging table, each with its marker; the
        # target holds nothing of the stream yet.
        assert await count_or_absent(destination, stage) == sum(p.rows for p in parts[:3])
        assert await count_or_absent(destination, "events") in (None, 0)
        assert await part_markers(destination, run) == ["part-00000", "part-00001", "part-00002"]

        second = Reporter(watch=lambda: count_or_absent(destination, "events"))
        totals = await load(dst, manifest, tmp_path, run, second)
    finally:
        await dst.close()

    assert any(f"Resuming at part 4 of {len(parts)}" in n for n in second.notes), second.notes
    # The second attempt copied parts 4 onwards (and reported the first
    # three as loaded at once, and heard of the stream once more just before
    # the apply's commit): readers saw no row of the stream until the apply.
    assert second.parts == 1 + len(parts) - 3 + 1
    assert set(second.seen) <= {None, 0}
    assert [(t.extracted, t.loaded) for t in totals] == [(ROWS, ROWS)]
    assert await fetch(destination, "SELECT count(*), count(DISTINCT id) FROM events") == [
        (ROWS, ROWS)
    ]
    assert await count_or_absent(destination, stage) is None  # dropped by the apply
    assert await part_markers(destination, run) == [""] + [
        f"part-{i:05d}" for i in range(len(parts))
    ]


async def test_a_load_run_again_after_its_apply_writes_nothing(
    source: str, destination: str, tmp_path: Path
) -> None:
    manifest = await staged(source, tmp_path)
    run = LoadIdentity(str(uuid.uuid4()))
    dst = await get_provider("postgres").connect(postgres_config(destination))
    try:
        await load(dst, manifest, tmp_path, run, Reporter())
        again = Reporter()
        totals = await load(dst, manifest, tmp_path, run, again)
    finally:
        await dst.close()
    assert again.parts == 0 and not again.notes
    assert [t.loaded for t in totals] == [ROWS]
    assert await fetch(destination, "SELECT count(*) FROM events") == [(ROWS,)]
    assert await count_or_absent(destination, stage_table(run.run_id, "public.events")) is None


async def prepare_target(url: str, mode: WriteMode) -> None:
    """A target with rows the stream updates, leaves alone and lacks (under
    append: only rows the stream lacks, as its key is unique)."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "CREATE TABLE events (id integer PRIMARY KEY, body text);"
            "INSERT INTO events VALUES (5000, 'not in the source')"
        )
        if mode is not WriteMode.APPEND:
            await conn.execute(
                "INSERT INTO events SELECT i, md5(i::text) FROM generate_series(1, 100) i;"
                "INSERT INTO events SELECT i, 'old' FROM generate_series(101, 200) i;"
            )
    finally:
        await conn.close()


@pytest.mark.parametrize("mode", list(WriteMode))
async def test_every_write_mode_lands_what_a_one_transaction_load_lands(
    source: str, pg_server_url: str, tmp_path: Path, mode: WriteMode
) -> None:
    manifest = await staged(source, tmp_path)
    results = []
    spec = {
        **SPEC,
        "operators": [
            {"op": "filter", "where": "id > 50"},
            {"op": "rename", "columns": {"body": "digest"}},
        ],
    }
    for resume in (NEVER, ALWAYS):
        async with scratch_database(pg_server_url) as url:
            await prepare_target(url, mode)
            await fetch(url, "ALTER TABLE events RENAME COLUMN body TO digest")
            dst = await get_provider("postgres").connect(postgres_config(url))
            reporter = Reporter()
            try:
                run = LoadIdentity(str(uuid.uuid4()))
                totals = await load(
                    dst, manifest, tmp_path, run, reporter, mode=mode, resume=resume, spec=spec
                )
            finally:
                await dst.close()
            rows = await fetch(url, "SELECT id, digest FROM events ORDER BY id")
            results.append((rows, [(t.loaded, t.changes) for t in totals]))
            assert any("staging table" in n for n in reporter.notes) == (resume is ALWAYS)
    assert results[0] == results[1]
    if mode is WriteMode.UPSERT:  # ids 51-100 as they were, 101-200 updated, the rest new
        assert results[1][1] == [(950, RowChanges(800, 100, 50))]


async def test_a_chain_with_a_blocking_operator_loads_in_one_piece(
    source: str, destination: str, tmp_path: Path
) -> None:
    manifest = await staged(source, tmp_path)
    run = LoadIdentity(str(uuid.uuid4()))
    dedupe = {"op": "dedupe", "keys": ["id"], "order_by": "body"}
    spec = {**SPEC, "operators": [dedupe]}
    dst = await get_provider("postgres").connect(postgres_config(destination))
    try:
        with pytest.raises(Stop):
            await load(dst, manifest, tmp_path, run, Reporter(stop_after_parts=3), spec=spec)
        # Nothing was kept: the retry starts from the first part.
        assert await part_markers(destination, run) == []
        assert await count_or_absent(destination, stage_table(run.run_id, "public.events")) is None
        retry = Reporter()
        await load(dst, manifest, tmp_path, run, retry, spec=spec)
    finally:
        await dst.close()
    assert retry.parts == len(manifest.streams[0].parts) and not retry.notes
    assert await part_markers(destination, run) == [""]
    assert await fetch(destination, "SELECT count(*) FROM events") == [(ROWS,)]


async def test_discovery_never_offers_a_staging_table(
    source: str, destination: str, tmp_path: Path
) -> None:
    manifest = await staged(source, tmp_path)
    run = LoadIdentity(str(uuid.uuid4()))
    dst = await get_provider("postgres").connect(postgres_config(destination))
    try:
        with pytest.raises(Stop):
            await load(dst, manifest, tmp_path, run, Reporter(stop_after_parts=1))
        offered = [s.name for s in await dst.discover()]
    finally:
        await dst.close()
    first = manifest.streams[0].parts[0].rows
    assert await count_or_absent(destination, stage_table(run.run_id, "public.events")) == first
    assert offered in (["events"], [])


# -- sqlite ---------------------------------------------------------------------


async def sqlite_destination(path: Path) -> Connector:
    return await get_provider("sqlite").connect({"path": str(path), "create": True})


def sqlite_rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return [tuple(r) for r in conn.execute(sql).fetchall()]
    finally:
        conn.close()


def sqlite_count(path: Path, table: str) -> int | None:
    if not sqlite_rows(path, f"SELECT 1 FROM sqlite_master WHERE name = '{table}'"):
        return None
    return int(sqlite_rows(path, f'SELECT count(*) FROM "{table}"')[0][0])


async def test_sqlite_a_load_stopped_between_parts_resumes_at_the_first_part_without_a_marker(
    source: str, tmp_path: Path
) -> None:
    manifest = await staged(source, tmp_path / "blob")
    parts = manifest.streams[0].parts
    path = tmp_path / "dst.db"
    run = LoadIdentity(str(uuid.uuid4()))
    stage = stage_table(run.run_id, "public.events")
    dst = await sqlite_destination(path)
    try:
        with pytest.raises(Stop):
            await load(dst, manifest, tmp_path / "blob", run, Reporter(stop_after_parts=3))
        assert sqlite_count(path, stage) == sum(p.rows for p in parts[:3])
        assert sqlite_count(path, "events") in (None, 0)
        # Discovery never offers the staging table.
        assert stage not in [s.name for s in await dst.discover()]
        second = Reporter(watch=lambda: _async(sqlite_count(path, "events")))
        await load(dst, manifest, tmp_path / "blob", run, second)
    finally:
        await dst.close()
    assert any(f"Resuming at part 4 of {len(parts)}" in n for n in second.notes), second.notes
    assert set(second.seen) <= {None, 0}
    assert sqlite_rows(path, "SELECT count(*), count(DISTINCT id) FROM events") == [(ROWS, ROWS)]
    assert sqlite_count(path, stage) is None
    marked = sqlite_rows(path, f"SELECT part FROM _setu_loads WHERE run_id = '{run.run_id}'")
    assert sorted(p for (p,) in marked) == [""] + [f"part-{i:05d}" for i in range(len(parts))]


async def _async(value: Any) -> Any:
    return value


@pytest.mark.parametrize("mode", list(WriteMode))
async def test_sqlite_every_write_mode_lands_what_a_one_transaction_load_lands(
    source: str, tmp_path: Path, mode: WriteMode
) -> None:
    manifest = await staged(source, tmp_path / "blob")
    spec = {**SPEC, "operators": [{"op": "filter", "where": "id > 50"}]}
    results = []
    for resume in (NEVER, ALWAYS):
        path = tmp_path / f"{resume.min_bytes}.db"
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, body TEXT)")
        conn.execute("INSERT INTO events VALUES (5000, 'not in the source')")
        if mode is not WriteMode.APPEND:
            conn.executemany(
                "INSERT INTO events VALUES (?, ?)",
                [(i, "old") for i in range(101, 201)],
            )
        conn.commit()
        conn.close()
        dst = await sqlite_destination(path)
        reporter = Reporter()
        try:
            run = LoadIdentity(str(uuid.uuid4()))
            totals = await load(
                dst, manifest, tmp_path / "blob", run, reporter, mode=mode, resume=resume, spec=spec
            )
        finally:
            await dst.close()
        rows = sqlite_rows(path, "SELECT id, body FROM events ORDER BY id")
        results.append((rows, [(t.loaded, t.changes) for t in totals]))
        assert any("staging table" in n for n in reporter.notes) == (resume is ALWAYS)
    assert results[0] == results[1]
