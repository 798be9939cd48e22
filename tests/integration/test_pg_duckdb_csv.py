"""PostgreSQL → DuckDB direct goes by CSV that PostgreSQL renders and
DuckDB's side parses through Arrow (capabilities csv_out / csv_in,
setu_engine/movement/transfer.py): the path is the one taken, every edge
value of every neutral type lands exactly as the rows path lands it, over
ctid ranges and over one COPY cut at record boundaries, a value that does
not fit is the ValueFault naming column and row, and a stream with an array
column takes the rows path."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_engine.capabilities import EXACT
from setu_engine.errors import ValueFault
from setu_engine.kinds import CopyBatch, WriteMode
from setu_engine.movement import transfer
from setu_engine.operators.chain import parse_spec
from setu_engine.providers.duckdb import PROVIDER as DUCKDB
from setu_engine.providers.postgres import PROVIDER as POSTGRES
from setu_engine.providers.postgres.connector import PostgresConnector
from setu_engine.staged.markers import LoadIdentity
from setu_engine.values.special import INFINITY
from setu_engine.values.types import Row, Stream
from tests.conformance import edges
from tests.conformance.support import same, same_rows
from tests.databases import postgres_config, scratch_database


class Quiet:
    async def extracted(self, stream: str, rows: int) -> None:
        return None

    async def loaded(self, stream: str, rows: int) -> None:
        return None


@pytest.fixture
async def source_url(pg_server_url: str) -> AsyncIterator[str]:
    async with scratch_database(pg_server_url, "setu_csv") as url:
        yield url


class Watched:
    """The source's CSV batches as the transfer asks for them."""

    def __init__(self, source: PostgresConnector) -> None:
        self.batches: list[CopyBatch] = []
        self._source = source
        self._csv = source.csv_batches

    async def csv_batches(self, stream: Stream, batch_rows: int) -> AsyncIterator[CopyBatch]:
        async for batch in self._csv(stream, batch_rows):
            self.batches.append(batch)
            yield batch


async def _edge_table(url: str) -> list[Row]:
    rows, _ = edges.table(EXACT)
    source = await POSTGRES.connect(postgres_config(url))
    try:

        async def one() -> AsyncIterator[list[Row]]:
            yield rows

        await source.write("edges", edges.COLUMNS, one(), WriteMode.OVERWRITE, ("id",))
    finally:
        await source.close()
    return rows


async def _copy(
    url: str, path: Path, streams: Sequence[str], batch_rows: int = 100_000
) -> tuple[Watched, list[transfer.StreamTotals]]:
    source = await POSTGRES.connect(postgres_config(url))
    destination = await DUCKDB.connect({"path": str(path), "create": True})
    watched = Watched(source)  # type: ignore[arg-type]
    source.csv_batches = watched.csv_batches  # type: ignore[attr-defined]
    try:
        chosen = transfer.select_streams(await source.discover(), streams)
        totals = await transfer.direct(
            source,
            destination,
            chosen,
            parse_spec(None),
            WriteMode.OVERWRITE,
            Quiet(),
            batch_rows,
            identity=LoadIdentity(str(uuid.uuid4())),
        )
        return watched, totals
    finally:
        await source.close()
        await destination.close()


async def _read(path: Path, stream: str) -> list[Row]:
    duck = await DUCKDB.connect({"path": str(path)})
    try:
        found = transfer.select_streams(await duck.discover(), [stream])[0]
        return sorted([r async for b in duck.read(found, 1000) for r in b], key=lambda r: r[0])
    finally:
        await duck.close()


def _differences(rows: list[Row], back: list[Row]) -> list[str]:
    _, expected = edges.table(EXACT)
    names = [c.name for c in edges.COLUMNS]
    types = [c.type for c in edges.COLUMNS]
    assert len(back) == len(rows)
    wrong: list[str] = []
    for row in back:
        for name, type_, value in zip(names, types, row, strict=True):
            want = row[0] if name == "id" else expected[(row[0], name)]
            if not same(want, value, type_):
                wrong.append(f"row {row[0]} {name}: {value!r} != {want!r}")
    return wrong


async def test_every_edge_value_lands_exactly_through_the_csv_path(
    source_url: str, tmp_path: Path
) -> None:
    rows = await _edge_table(source_url)
    watched, totals = await _copy(source_url, tmp_path / "d.duckdb", ["edges"])
    assert watched.batches, "the CSV path was not taken"
    assert sum(b.rows for b in watched.batches) == len(rows)
    assert totals[0].loaded == len(rows)
    assert _differences(rows, await _read(tmp_path / "d.duckdb", "edges")) == []


async def test_a_view_is_one_copy_cut_at_record_boundaries(source_url: str, tmp_path: Path) -> None:
    rows = await _edge_table(source_url)
    conn = await asyncpg.connect(source_url)
    try:
        await conn.execute("CREATE VIEW edges_view AS SELECT * FROM edges")
    finally:
        await conn.close()
    # Two rows a batch: cuts fall beside text holding quotes and newlines.
    watched, _ = await _copy(source_url, tmp_path / "v.duckdb", ["edges_view"], batch_rows=2)
    assert len(watched.batches) > 1
    assert all(b.rows >= 2 for b in watched.batches[:-1])
    assert sum(b.rows for b in watched.batches) == len(rows)
    assert _differences(rows, await _read(tmp_path / "v.duckdb", "edges_view")) == []


async def test_a_value_that_does_not_fit_names_its_column_and_row(
    source_url: str, tmp_path: Path
) -> None:
    conn = await asyncpg.connect(source_url)
    try:
        await conn.execute(
            "CREATE TABLE amounts (id bigint PRIMARY KEY, amount numeric(5,2));"
            "INSERT INTO amounts VALUES (1, 1.5), (2, NULL), (3, 'NaN'), (4, 2)"
        )
    finally:
        await conn.close()
    with pytest.raises(ValueFault) as caught:
        await _copy(source_url, tmp_path / "f.duckdb", ["amounts"])
    assert caught.value.column == "amount"
    assert caught.value.row == 3
    assert "DECIMAL(5,2)" in str(caught.value)


async def test_an_array_column_takes_the_rows_path(source_url: str, tmp_path: Path) -> None:
    conn = await asyncpg.connect(source_url)
    try:
        await conn.execute(
            "CREATE TABLE tagged (id bigint PRIMARY KEY, tags text[]);"
            "INSERT INTO tagged VALUES (1, ARRAY['a', 'b,c', NULL]), (2, '{}')"
        )
    finally:
        await conn.close()
    watched, totals = await _copy(source_url, tmp_path / "a.duckdb", ["tagged"])
    assert watched.batches == []
    assert totals[0].loaded == 2
    back: Any = await _read(tmp_path / "a.duckdb", "tagged")
    assert [r[0] for r in back] == [1, 2]


async def test_a_batch_without_quotes_lands_exactly(source_url: str, tmp_path: Path) -> None:
    # No empty text, comma, quote or newline in a value: the faster parser.
    conn = await asyncpg.connect(source_url)
    try:
        await conn.execute(
            "CREATE TABLE plain (id bigint PRIMARY KEY, amount numeric(12,2), at timestamptz,"
            " note text, ok boolean);"
            "INSERT INTO plain VALUES (1, 12.30, '2024-01-02 03:04:05.000006+05:30', 'a b', true),"
            " (2, NULL, NULL, NULL, NULL), (3, -0.01, 'infinity', 'NULL', false)"
        )
        expected = [tuple(r) for r in await conn.fetch("SELECT * FROM plain ORDER BY id")]
    finally:
        await conn.close()
    watched, _ = await _copy(source_url, tmp_path / "p.duckdb", ["plain"])
    assert watched.batches and all(b'"' not in bytes(b.data) for b in watched.batches)
    back = await _read(tmp_path / "p.duckdb", "plain")
    assert back[0] == expected[0] and back[1] == expected[1]
    assert back[2][:2] == expected[2][:2] and back[2][3:] == expected[2][3:]
    assert back[2][2] is INFINITY


class Stopping(Quiet):
    """Stops the run once the first batch has been written (a cancel)."""

    async def loaded(self, stream: str, rows: int) -> None:
        raise asyncio.CancelledError


async def test_a_run_stopped_mid_copy_leaves_the_file_as_it_was(
    source_url: str, tmp_path: Path
) -> None:
    await _edge_table(source_url)
    path = tmp_path / "c.duckdb"
    await _copy(source_url, path, ["edges"])
    before = await _read(path, "edges")
    conn = await asyncpg.connect(source_url)
    try:
        await conn.execute("INSERT INTO edges (id) SELECT generate_series(100, 5000)")
    finally:
        await conn.close()
    source = await POSTGRES.connect(postgres_config(source_url))
    destination = await DUCKDB.connect({"path": str(path)})
    watched = Watched(source)  # type: ignore[arg-type]
    source.csv_batches = watched.csv_batches  # type: ignore[attr-defined]
    try:
        chosen = transfer.select_streams(await source.discover(), ["edges"])
        with pytest.raises(asyncio.CancelledError):
            await transfer.direct(
                source,
                destination,
                chosen,
                parse_spec(None),
                WriteMode.OVERWRITE,
                Stopping(),
                100,
                identity=LoadIdentity(str(uuid.uuid4())),
            )
    finally:
        await source.close()
        await destination.close()
    assert watched.batches, "the CSV path was not taken"
    after = await _read(path, "edges")
    assert len(after) == len(before) and same_rows(after, before)


async def test_the_sessions_time_zone_is_the_rows_paths(source_url: str, tmp_path: Path) -> None:
    # Instants land in UTC; a column read as text keeps the session's zone.
    conn = await asyncpg.connect(source_url)
    try:
        await conn.execute(
            f"ALTER DATABASE {conn._params.database} SET TimeZone = 'Asia/Kolkata';"
            "CREATE TABLE zoned (id bigint PRIMARY KEY, at timestamptz, span tstzrange);"
            "INSERT INTO zoned VALUES (1, '2024-01-02 03:04:05.000006+00',"
            " tstzrange('2024-01-01 00:00+00', '2024-01-02 00:00+00'))"
        )
    finally:
        await conn.close()
    conn = await asyncpg.connect(source_url)
    try:
        span = await conn.fetchval("SELECT span::text FROM zoned")
    finally:
        await conn.close()
    assert "+05:30" in span
    watched, _ = await _copy(source_url, tmp_path / "z.duckdb", ["zoned"])
    assert watched.batches
    back = await _read(tmp_path / "z.duckdb", "zoned")
    assert back == [(1, datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC), span)]
