"""Overlapped stages (setu_engine/movement/transfer.py, stage_and_load): a
cloud → cloud run loads its last stream while extracting it, into real
PostgreSQL databases through a real blob folder. The load reads a part only
once it is stored whole; it commits only after the manifest is recorded; an
extract that fails midway leaves the destination unchanged; a retry after a
crash lands each row once, as the manifest describes it. A stream that
proves large while it is extracted is not loaded beside it: it loads part
by part afterwards, resumably (setu_engine/staged/resumable.py)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_engine.errors import PermanentError
from setu_engine.kinds import CopyBatch, WriteMode
from setu_engine.movement import transfer
from setu_engine.operators.chain import parse_spec
from setu_engine.providers import get_provider
from setu_engine.providers.base import Connector
from setu_engine.staged import staging
from setu_engine.staged.blob import LocalBlobStore
from setu_engine.staged.markers import MARKERS, LoadIdentity
from setu_engine.staged.resumable import DEFAULT_POLICY, ResumePolicy, stage_table
from setu_engine.staged.staging import Manifest
from tests.databases import postgres_config, scratch_database

ROWS = 1_000
PART_ROWS = 100  # so several parts


class SourceLost(Exception):
    """The source went away midway through the extract."""


class Unrecorded(Exception):
    """The record of what was staged was lost (the worker died sending it)."""


class WatchedBlob(LocalBlobStore):
    """A blob folder that remembers which keys were stored whole."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.stored: set[str] = set()

    async def put(self, key: str, data: bytes) -> None:
        await super().put(key, data)
        self.stored.add(key)


@dataclass
class Reporter:
    loaded_rows: int = 0
    peak: int = 0  # the most loaded_rows ever was
    loaded_once: asyncio.Event = field(default_factory=asyncio.Event)
    notes: list[str] = field(default_factory=list)

    async def extracted(self, stream: str, rows: int) -> None:
        pass

    async def loaded(self, stream: str, rows: int) -> None:
        self.loaded_rows += rows
        self.peak = max(self.peak, self.loaded_rows)
        self.loaded_once.set()

    async def note(self, stream: str, message: str) -> None:
        self.notes.append(message)


@pytest.fixture
async def source(pg_server_url: str) -> AsyncIterator[str]:
    async with scratch_database(pg_server_url) as url:
        conn = await asyncpg.connect(url)
        await conn.execute(
            "CREATE TABLE events (id integer PRIMARY KEY, body text);"
            f"INSERT INTO events SELECT i, md5(i::text) FROM generate_series(1, {ROWS}) i;"
            "ANALYZE events"
        )
        await conn.close()
        yield url


@pytest.fixture
async def destination(pg_server_url: str) -> AsyncIterator[str]:
    async with scratch_database(pg_server_url) as url:
        conn = await asyncpg.connect(url)
        # What a failed run must leave as it was.
        await conn.execute(
            "CREATE TABLE events (id integer PRIMARY KEY, body text);"
            "INSERT INTO events VALUES (-1, 'before'), (-2, 'before')"
        )
        await conn.close()
        yield url


async def fetch(url: str, sql: str) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(url)
    try:
        return [tuple(r) for r in await conn.fetch(sql)]
    finally:
        await conn.close()


async def counts(url: str) -> tuple[int, int]:
    [(rows, distinct)] = await fetch(url, "SELECT count(*), count(DISTINCT id) FROM events")
    return rows, distinct


async def connect(url: str) -> Connector:
    return await get_provider("postgres").connect(postgres_config(url))


async def overlapped(
    src: Connector,
    dst: Connector,
    blob: LocalBlobStore,
    run: LoadIdentity,
    reporter: Reporter,
    staged: transfer.StagedHook,
    mode: WriteMode = WriteMode.OVERWRITE,
    *,
    resume: ResumePolicy = DEFAULT_POLICY,
    batch_rows: int = PART_ROWS,
    spec: dict[str, Any] | None = None,
) -> tuple[Manifest, list[transfer.StreamTotals]]:
    streams = transfer.select_streams(await src.discover(), ["events"])
    return await transfer.stage_and_load(
        src,
        dst,
        streams,
        blob,
        "run/",
        parse_spec(spec),
        mode,
        reporter,
        identity=run,
        staged=staged,
        batch_rows=batch_rows,
        resume=resume,
    )


async def part_markers(url: str, run: LoadIdentity) -> list[str]:
    rows = await fetch(
        url, f"SELECT part FROM {MARKERS} WHERE run_id = '{run.run_id}' ORDER BY part"
    )
    return [part for (part,) in rows]


async def nothing_recorded(manifest: Manifest) -> None:
    pass


async def test_the_load_reads_each_part_once_it_is_stored_and_commits_after_the_manifest(
    source: str, destination: str, tmp_path: Path
) -> None:
    blob = WatchedBlob(tmp_path)
    src, dst = await connect(source), await connect(destination)
    received: list[tuple[int, bool]] = []  # (part index, stored whole when the load read it)
    copy = dst.write_copy  # type: ignore[attr-defined]

    async def watched(
        stream: str, columns: Any, parts: AsyncIterator[CopyBatch], *args: Any, **kw: Any
    ) -> Any:
        async def checked() -> AsyncIterator[CopyBatch]:
            async for part in parts:
                index = len(received)
                path = f"part-{index:05d}.pgcopy.zst"
                received.append((index, any(k.endswith(path) for k in blob.stored)))
                yield part

        return await copy(stream, columns, checked(), *args, **kw)

    dst.write_copy = watched  # type: ignore[attr-defined]
    seen_at_record: list[tuple[int, int]] = []

    async def record(manifest: Manifest) -> None:
        # Readers of the destination see nothing of the run before this (an
        # append: an overwrite's TRUNCATE would hold them until the commit).
        seen_at_record.append(await counts(destination))

    try:
        manifest, totals = await overlapped(
            src, dst, blob, LoadIdentity(str(uuid.uuid4())), Reporter(), record, WriteMode.APPEND
        )
    finally:
        await src.close()
        await dst.close()

    parts = manifest.streams[0].parts
    assert len(parts) > 2
    assert [index for index, _ in received] == list(range(len(parts)))
    assert all(whole for _, whole in received), received
    assert seen_at_record == [(2, 2)]  # the rows from before, still
    assert await blob.exists("run/" + staging.MANIFEST)
    assert [(t.extracted, t.loaded) for t in totals] == [(ROWS, ROWS)]
    assert await counts(destination) == (ROWS + 2, ROWS + 2)


async def test_an_extract_that_fails_midway_leaves_the_destination_unchanged(
    source: str, destination: str, tmp_path: Path
) -> None:
    blob = WatchedBlob(tmp_path)
    src, dst = await connect(source), await connect(destination)
    reporter = Reporter()
    read = src.copy_batches  # type: ignore[attr-defined]

    async def failing(stream: Any, batch_rows: int) -> AsyncIterator[CopyBatch]:
        async for batch in read(stream, batch_rows):
            yield batch
            # Fail once the load is surely writing into the destination.
            if reporter.loaded_once.is_set():
                raise SourceLost("the source went away")
            await asyncio.wait_for(reporter.loaded_once.wait(), 30)

    src.copy_batches = failing  # type: ignore[attr-defined]
    recorded: list[Manifest] = []

    async def record(manifest: Manifest) -> None:
        recorded.append(manifest)

    try:
        with pytest.raises(SourceLost):
            await overlapped(src, dst, blob, LoadIdentity(str(uuid.uuid4())), reporter, record)
    finally:
        await src.close()
        await dst.close()

    assert reporter.loaded_rows > 0  # the load had copied parts: they were rolled back
    assert recorded == []
    assert not await blob.exists("run/" + staging.MANIFEST)
    assert await fetch(destination, "SELECT id, body FROM events ORDER BY id") == [
        (-2, "before"),
        (-1, "before"),
    ]


async def test_a_retry_after_a_crash_before_or_at_the_record_lands_each_row_once(
    source: str, destination: str, tmp_path: Path
) -> None:
    blob = WatchedBlob(tmp_path)
    run = LoadIdentity(str(uuid.uuid4()))

    async def lost(manifest: Manifest) -> None:
        raise Unrecorded("the worker died recording what it staged")

    src, dst = await connect(source), await connect(destination)
    try:
        with pytest.raises(Unrecorded):
            await overlapped(src, dst, blob, run, Reporter(), lost)
    finally:
        await src.close()
        await dst.close()
    # Nothing committed: the run's phase was never load, so its retry
    # extracts again, from a source that changed in between.
    assert await counts(destination) == (2, 2)
    more = await asyncpg.connect(source)
    await more.execute(
        "DELETE FROM events WHERE id <= 100;"
        "INSERT INTO events SELECT i, md5(i::text) FROM generate_series(1001, 1150) i"
    )
    await more.close()

    recorded: list[Manifest] = []

    async def record(manifest: Manifest) -> None:
        recorded.append(manifest)

    src, dst = await connect(source), await connect(destination)
    try:
        manifest, _ = await overlapped(src, dst, blob, run, Reporter(), record)
    finally:
        await src.close()
        await dst.close()
    assert len(recorded) == 1
    assert manifest.rows == ROWS + 50
    assert await counts(destination) == (ROWS + 50, ROWS + 50)
    [(low, high)] = await fetch(destination, "SELECT min(id), max(id) FROM events")
    assert (low, high) == (101, 1150)

    # A retry at load (the record landed, its answer did not) reads the
    # manifest and loads nothing twice.
    dst = await connect(destination)
    try:
        again = await transfer.load(
            dst,
            await staging.read_manifest(blob, "run/"),
            blob,
            "run/",
            parse_spec(None),
            WriteMode.OVERWRITE,
            Reporter(),
            identity=run,
        )
    finally:
        await dst.close()
    assert [t.loaded for t in again] == [ROWS + 50]
    assert await counts(destination) == (ROWS + 50, ROWS + 50)


async def test_a_load_that_fails_lets_the_extract_finish_so_a_retry_resumes_at_load(
    source: str, destination: str, tmp_path: Path
) -> None:
    conn = await asyncpg.connect(destination)
    # The load fails at its first part: ids reach past 50 there.
    await conn.execute("ALTER TABLE events ADD CONSTRAINT small CHECK (id < 50)")
    await conn.close()
    blob = WatchedBlob(tmp_path)
    src, dst = await connect(source), await connect(destination)
    load_failed = asyncio.Event()
    copy, read = dst.write_copy, src.copy_batches  # type: ignore[attr-defined]

    async def failing_load(*args: Any, **kw: Any) -> Any:
        try:
            return await copy(*args, **kw)
        finally:
            load_failed.set()

    async def slow_source(stream: Any, batch_rows: int) -> AsyncIterator[CopyBatch]:
        async for batch in read(stream, batch_rows):
            yield batch
            # The extract is still going when the load fails.
            await asyncio.wait_for(load_failed.wait(), 30)

    dst.write_copy = failing_load  # type: ignore[attr-defined]
    src.copy_batches = slow_source  # type: ignore[attr-defined]
    recorded: list[Manifest] = []

    async def record(manifest: Manifest) -> None:
        recorded.append(manifest)

    try:
        with pytest.raises(PermanentError, match="small"):
            await overlapped(
                src,
                dst,
                blob,
                LoadIdentity(str(uuid.uuid4())),
                Reporter(),
                record,
                WriteMode.APPEND,
            )
    finally:
        await src.close()
        await dst.close()

    assert [m.rows for m in recorded] == [ROWS]  # staged whole: the phase is load
    assert (await staging.read_manifest(blob, "run/")).rows == ROWS
    assert await fetch(destination, "SELECT id FROM events ORDER BY id") == [(-2,), (-1,)]


async def test_a_stream_that_proves_large_loads_part_by_part_after_its_extract(
    source: str, destination: str, tmp_path: Path
) -> None:
    blob = WatchedBlob(tmp_path)
    run = LoadIdentity(str(uuid.uuid4()))
    reporter = Reporter()
    large = ResumePolicy(min_bytes=1)  # reached by the second part
    src, dst = await connect(source), await connect(destination)
    read = src.copy_batches  # type: ignore[attr-defined]

    async def gated(stream: Any, batch_rows: int) -> AsyncIterator[CopyBatch]:
        async for batch in read(stream, batch_rows):
            yield batch
            # The load beside the extract copies the first part before the
            # second is staged: what it then steps aside from is real work.
            await asyncio.wait_for(reporter.loaded_once.wait(), 30)

    src.copy_batches = gated  # type: ignore[attr-defined]
    try:
        manifest, totals = await overlapped(
            src, dst, blob, run, reporter, nothing_recorded, WriteMode.APPEND, resume=large
        )
        # Not loaded beside the extract: nothing of it committed, and no
        # rows counted as loaded (what the load beside it had copied went).
        assert totals == []
        assert await counts(destination) == (2, 2)
        assert await part_markers(destination, run) == []
        first = manifest.streams[0].parts[0].rows
        assert reporter.peak == first and reporter.loaded_rows == 0
        assert [n for n in reporter.notes if "large stream" in n] == [
            "public.events: large stream (≥ 1 bytes staged): loads part by part after "
            "the extract, so a crash resumes"
        ]
        assert manifest.rows == ROWS  # the extract went on alone, whole
        loaded = await transfer.load(
            dst,
            manifest,
            blob,
            "run/",
            parse_spec(None),
            WriteMode.APPEND,
            reporter,
            identity=run,
            resume=large,
        )
    finally:
        await src.close()
        await dst.close()

    parts = manifest.streams[0].parts
    assert len(parts) > 2
    # Each part was copied into the staging table with a marker of its own.
    assert await part_markers(destination, run) == [""] + [
        f"part-{i:05d}" for i in range(len(parts))
    ]
    stage = stage_table(run.run_id, "public.events")
    assert await fetch(destination, f"SELECT to_regclass('public.\"{stage}\"')") == [(None,)]
    assert [t.loaded for t in loaded] == [ROWS]
    assert reporter.loaded_rows == ROWS
    assert await counts(destination) == (ROWS + 2, ROWS + 2)


@pytest.mark.parametrize(
    ("min_bytes", "batch_rows", "operators"),
    [
        (2**30, PART_ROWS, []),  # several parts, far below min_bytes
        (1, ROWS, []),  # past min_bytes, but one part
        (1, PART_ROWS, [{"op": "dedupe", "keys": ["id"], "order_by": "body"}]),  # blocking
    ],
    ids=["below-min-bytes", "one-part", "blocking-chain"],
)
async def test_a_stream_that_stays_small_or_cannot_resume_still_loads_beside_its_extract(
    source: str,
    destination: str,
    tmp_path: Path,
    min_bytes: int,
    batch_rows: int,
    operators: list[dict[str, Any]],
) -> None:
    blob = WatchedBlob(tmp_path)
    run = LoadIdentity(str(uuid.uuid4()))
    reporter = Reporter()
    spec = {"primary_key": {"events": ["id"]}, "operators": operators}
    src, dst = await connect(source), await connect(destination)
    try:
        _, totals = await overlapped(
            src,
            dst,
            blob,
            run,
            reporter,
            nothing_recorded,
            WriteMode.APPEND,
            resume=ResumePolicy(min_bytes=min_bytes),
            batch_rows=batch_rows,
            spec=spec,
        )
    finally:
        await src.close()
        await dst.close()
    assert [(t.extracted, t.loaded) for t in totals] == [(ROWS, ROWS)]
    assert not [n for n in reporter.notes if "large stream" in n]
    assert await part_markers(destination, run) == [""]  # one transaction, one marker
    assert await counts(destination) == (ROWS + 2, ROWS + 2)
