"""Load markers (setu_engine/staged/markers.py) in each destination: a load
that finds its marker writes nothing and answers the rows the marker
recorded, whatever the write mode; a load that failed left no marker; two
attempts at once write once; discovery never offers the markers."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from setu_engine.kinds import CopyBatch, WriteMode
from setu_engine.operators.chain import parse_spec
from setu_engine.providers.base import Connector
from setu_engine.providers.postgres import PROVIDER as POSTGRES
from setu_engine.providers.postgres.connector import PostgresConnector
from setu_engine.providers.sqlite import PROVIDER as SQLITE
from setu_engine.staged import pgcopy
from setu_engine.staged.markers import LoadIdentity, LoadMarker
from setu_engine.staged.resumable import part_marker, stage_marker, stage_table
from setu_engine.values.types import Batch, Column
from tests.databases import postgres_config, scratch_database
from tests.integration.test_files_provider import Place, place  # noqa: F401 (a fixture)

COLUMNS = [Column("id", "bigint", nullable=False), Column("name", "text")]
ROWS: Batch = [(1, "a"), (2, "b"), (3, "c")]


def marker(stream: str = "public.people", run: str | None = None) -> LoadMarker:
    return LoadMarker(run or str(uuid.uuid4()), stream)


async def batches(*items: Batch) -> AsyncIterator[Batch]:
    for batch in items:
        yield batch


async def failing(*items: Batch) -> AsyncIterator[Batch]:
    for batch in items:
        yield batch
    raise RuntimeError("the source broke")


# -- postgres -----------------------------------------------------------------


@pytest.fixture
async def url(pg_server_url: str) -> AsyncIterator[str]:
    async with scratch_database(pg_server_url) as scratch:
        yield scratch


@pytest.fixture
async def pg(url: str) -> AsyncIterator[PostgresConnector]:
    conn = await POSTGRES.connect(postgres_config(url))
    try:
        yield conn
    finally:
        await conn.close()


async def people(url: str) -> list[tuple[object, ...]]:
    conn = await asyncpg.connect(url)
    try:
        return [tuple(r) for r in await conn.fetch("SELECT * FROM people ORDER BY id")]
    finally:
        await conn.close()


def copies(*items: Batch) -> AsyncIterator[CopyBatch]:
    async def gen() -> AsyncIterator[CopyBatch]:
        for batch in items:
            yield CopyBatch(pgcopy.encode(COLUMNS, batch), len(batch))

    return gen()


async def pg_write(
    pg: PostgresConnector, mode: WriteMode, mark: LoadMarker | None, *items: Batch
) -> int:
    plan = parse_spec(None).chain_for("people").plan(COLUMNS)
    key = ["id"] if mode.needs_key else []
    return await pg.write_copy("people", COLUMNS, copies(*items), plan, mode, key, marker=mark)


@pytest.mark.parametrize("mode", list(WriteMode))
async def test_postgres_a_marked_load_applies_once_in_every_mode(
    pg: PostgresConnector, url: str, mode: WriteMode
) -> None:
    mark = marker()
    assert await pg_write(pg, mode, mark, ROWS[:2], ROWS[2:]) == 3
    # The same load again (its result was lost): nothing written, same answer.
    assert await pg_write(pg, mode, mark, [(9, "again")]) == 3
    assert await people(url) == ROWS
    # The row path (a non-COPY source) honours the marker too.
    rows = batches([(9, "again")])
    key = ["id"] if mode.needs_key else []
    assert await pg.write("people", COLUMNS, rows, mode, key, marker=mark) == 3
    assert await people(url) == ROWS
    # Another run, or another stream of this run, is another load.
    assert await pg_write(pg, mode, marker(), [(4, "d")]) == 1
    assert await pg_write(pg, mode, marker("public.other", mark.run_id), [(5, "e")]) == 1
    conn = await asyncpg.connect(url)
    try:
        recorded = await conn.fetch("SELECT run_id::text, stream, part, rows FROM _setu_loads")
    finally:
        await conn.close()
    assert (mark.run_id, "public.people", "", 3) in [tuple(r) for r in recorded]
    assert len(recorded) == 3


async def test_postgres_a_failed_load_leaves_no_marker_and_loads_on_retry(
    pg: PostgresConnector, url: str
) -> None:
    mark = marker()
    with pytest.raises(RuntimeError):
        await pg.write("people", COLUMNS, failing(ROWS), WriteMode.APPEND, [], marker=mark)
    assert await pg.write("people", COLUMNS, batches(ROWS), WriteMode.APPEND, [], marker=mark) == 3
    assert await people(url) == ROWS


async def test_postgres_two_attempts_at_once_write_once(pg: PostgresConnector, url: str) -> None:
    """The first attempt holds its load open while the second starts; once the
    first commits, the second finds its marker and writes nothing."""
    mark = marker()
    await pg_write(pg, WriteMode.APPEND, marker(), [])  # the tables exist
    inside, release = asyncio.Event(), asyncio.Event()

    async def held() -> AsyncIterator[CopyBatch]:
        yield CopyBatch(pgcopy.encode(COLUMNS, ROWS), 3)
        inside.set()
        await release.wait()

    plan = parse_spec(None).chain_for("people").plan(COLUMNS)
    first = asyncio.create_task(
        pg.write_copy("people", COLUMNS, held(), plan, WriteMode.APPEND, [], marker=mark)
    )
    await inside.wait()
    other = await POSTGRES.connect(postgres_config(url))
    try:
        second = asyncio.create_task(pg_write(other, WriteMode.APPEND, mark, ROWS))
        release.set()
        assert await first == 3
        assert await second == 3
    finally:
        await other.close()
    assert await people(url) == ROWS


async def blocked_by(watcher: asyncpg.Connection, pid: int, holder: int) -> None:
    """Until backend `pid` waits on a lock `holder` holds (bounded)."""
    deadline = asyncio.get_running_loop().time() + 30
    while holder not in await watcher.fetchval("SELECT pg_blocking_pids($1)", pid):
        assert asyncio.get_running_loop().time() < deadline, f"{pid} never waited on {holder}"
        await asyncio.sleep(0.02)


async def test_postgres_two_attempts_at_one_staged_part_copy_it_once(
    pg: PostgresConnector, url: str
) -> None:
    """A lapsed lease's attempt and the retry stage the same part at once:
    the second waits at the first's claim of the part's marker, and once the
    first commits it copies nothing."""
    run = LoadIdentity(str(uuid.uuid4()))
    stream = "public.people"
    stage = stage_table(run.run_id, stream)
    part = part_marker(run, stream, 0)
    await pg.prepare_stage(stage, COLUMNS, None, stage_marker(run.run_id, stream))
    batch = CopyBatch(pgcopy.encode(COLUMNS, ROWS), len(ROWS))
    holder = await asyncpg.connect(url)
    other = await POSTGRES.connect(postgres_config(url))
    try:
        # The staging table locked: the first attempt claims the part, then
        # waits to copy; the second waits at the claim the first holds.
        await holder.execute("BEGIN")
        await holder.execute(f'LOCK TABLE public."{stage}" IN SHARE MODE')
        first = asyncio.create_task(pg.stage_part(stage, COLUMNS, batch, part, None))
        await blocked_by(holder, pg._conn.get_server_pid(), holder.get_server_pid())
        second = asyncio.create_task(other.stage_part(stage, COLUMNS, batch, part, None))
        await blocked_by(holder, other._conn.get_server_pid(), pg._conn.get_server_pid())
        await holder.execute("ROLLBACK")
        assert await first is True, "the first attempt copied the part"
        assert await second is False, "the second found it copied"
        staged = await holder.fetch(f'SELECT id FROM public."{stage}" ORDER BY id')
    finally:
        await other.close()
        await holder.close()
    assert [r["id"] for r in staged] == [1, 2, 3]


async def test_postgres_discovery_never_offers_the_markers(pg: PostgresConnector) -> None:
    await pg_write(pg, WriteMode.APPEND, marker(), ROWS)
    assert [s.name for s in await pg.discover()] == ["people"]


# -- sqlite -------------------------------------------------------------------


async def sqlite_connector(path: Path) -> Connector:
    return await SQLITE.connect({"path": str(path), "create": True})


def sqlite_rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as db:
        return [tuple(r) for r in db.execute(sql)]


@pytest.mark.parametrize("mode", list(WriteMode))
async def test_sqlite_a_marked_load_applies_once_in_every_mode(
    tmp_path: Path, mode: WriteMode
) -> None:
    path = tmp_path / "dest.db"
    conn = await sqlite_connector(path)
    key = ["id"] if mode.needs_key else []
    mark = marker()
    try:
        assert await conn.write("people", COLUMNS, batches(ROWS), mode, key, marker=mark) == 3
        again = batches([(9, "again")])
        assert await conn.write("people", COLUMNS, again, mode, key, marker=mark) == 3
        with pytest.raises(RuntimeError):
            await conn.write("people", COLUMNS, failing([(7, "x")]), mode, key, marker=marker())
        assert [s.name for s in await conn.discover()] == ["people"]
    finally:
        await conn.close()
    assert sqlite_rows(path, "SELECT * FROM people ORDER BY id") == ROWS
    assert sqlite_rows(path, "SELECT run_id, stream, part, rows FROM _setu_loads") == [
        (mark.run_id, "public.people", "", 3)
    ]


# -- files --------------------------------------------------------------------


@pytest.mark.parametrize("mode", [WriteMode.APPEND, WriteMode.OVERWRITE])
async def test_files_a_marked_load_applies_once(place: Place, mode: WriteMode) -> None:  # noqa: F811
    conn = await place.connect(format="csv")
    mark = marker()
    try:
        assert await conn.write("people", COLUMNS, batches(ROWS), mode, [], marker=mark) == 3
        again = batches([(9, "again")])
        assert await conn.write("people", COLUMNS, again, mode, [], marker=mark) == 3
        # A load that failed wrote no marker: its retry loads.
        other = marker()
        with pytest.raises(RuntimeError):
            await conn.write("people", COLUMNS, failing([(4, "d")]), mode, [], marker=other)
        assert await conn.write("people", COLUMNS, batches([(4, "d")]), mode, [], marker=other) == 1
        assert [s.name for s in await conn.discover()] == ["people"]
    finally:
        await conn.close()
    expected = b"id,name\n1,a\n2,b\n3,c\n4,d\n" if mode is WriteMode.APPEND else b"id,name\n4,d\n"
    assert await place.get("people.csv") == expected
    recorded = await place.get(f"_setu_loads/{mark.run_id}/public.people.json")
    assert mark.rows_in(recorded) == 3
