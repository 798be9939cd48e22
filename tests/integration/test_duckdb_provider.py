"""The duckdb provider on real DuckDB files: config, discovery and its type
mapping, reads, every write mode with its exact counts, all-or-nothing
writes, load markers, types round trip value by value (edge values
included), cancellation, the write lock held by another process, hostile
names and the sandbox, and the cloud policy's confinement of `path`."""

from __future__ import annotations

import asyncio
import math
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, time
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest

from setu_agent.cloud.policy import CloudPolicy, LocalReach
from setu_engine.errors import ConfigError, PermanentError, TransientError, ValueFault
from setu_engine.kinds import RowChanges, WriteMode, changes_of
from setu_engine.planning.destination_plan import SchemaChanges
from setu_engine.providers.base import Connector
from setu_engine.providers.duckdb.connector import PROVIDER
from setu_engine.staged.markers import MARKERS, LoadMarker
from setu_engine.values.special import INFINITY, JSON_NULL, MINUS_INFINITY
from setu_engine.values.types import Batch, Column, Stream
from setu_engine.values.window import Since


async def connect(path: Path, **extra: Any) -> Connector:
    return await PROVIDER.connect({"path": str(path), "create": True, **extra})


async def batches_of(*batches: Batch) -> AsyncIterator[Batch]:
    for batch in batches:
        yield batch


async def failing_after(*batches: Batch) -> AsyncIterator[Batch]:
    for batch in batches:
        yield batch
    raise RuntimeError("the source broke mid-stream")


def rows_of(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(path), read_only=True) as db:
        db.execute("SET TimeZone = 'UTC'")
        return db.execute(sql).fetchall()


def types_of(path: Path, table: str) -> dict[str, str]:
    found = rows_of(
        path,
        "SELECT column_name, data_type FROM information_schema.columns "
        f"WHERE table_name = '{table}' ORDER BY ordinal_position",
    )
    return dict(found)  # type: ignore[arg-type]


async def write(
    path: Path,
    table: str,
    columns: list[Column],
    rows: Batch,
    mode: WriteMode = WriteMode.APPEND,
    key: tuple[str, ...] = (),
    **options: Any,
) -> int:
    conn = await connect(path)
    try:
        return await conn.write(table, columns, batches_of(rows), mode, key, **options)
    finally:
        await conn.close()


# --- config ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, "config.path"),
        ({"path": ""}, "config.path"),
        ({"path": 3}, "config.path"),
        ({"path": ":memory:"}, "config.path"),
        ({"path": "x.duckdb", "create": "yes"}, "config.create"),
        ({"path": "x.duckdb", "schema": ""}, "config.schema"),
        ({"path": "x.duckdb", "host": "h"}, "duckdb takes path, create, schema"),
    ],
)
def test_config_errors_name_the_field(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PROVIDER.validate_config(config)


async def test_a_missing_file_without_create_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no such file .* set create: true"):
        await PROVIDER.connect({"path": str(tmp_path / "none.duckdb")})
    assert not (tmp_path / "none.duckdb").exists()


async def test_test_names_version_path_and_tables(tmp_path: Path) -> None:
    path = tmp_path / "t.duckdb"
    await write(path, "a", [Column("id", "integer")], [(1,)])
    conn = await PROVIDER.connect({"path": str(path)})
    try:
        said = await conn.test()
    finally:
        await conn.close()
    assert said == f"DuckDB {duckdb.__version__} at {path} (1 table)"


# --- types, both ways --------------------------------------------------------

EDGE_COLUMNS = [
    Column("id", "integer", False),
    Column("flag", "boolean"),
    Column("small", "smallint"),
    Column("whole", "integer"),
    Column("big", "bigint"),
    Column("ratio", "real"),
    Column("x", "double"),
    Column("amount", "numeric", True, "numeric(12,2)"),
    Column("wide", "numeric", True, "numeric(38,10)"),
    Column("exact", "numeric"),
    Column("name", "text", True, "character varying(20)"),
    Column("blob", "bytes"),
    Column("born", "date"),
    Column("alarm", "time"),
    Column("seen", "timestamp"),
    Column("stamped", "timestamptz"),
    Column("ident", "uuid"),
    Column("doc", "json"),
    Column("tags", "text", True, "text[]"),
    Column("counts", "text", True, "integer[]"),
]
SCRIPTS = "Ünïcödé नमस्ते 日本語 مرحبا Привет שלום ελληνικά 🚀👩🏽‍💻"
EDGE_ROWS: Batch = [
    (
        1,
        True,
        -(2**15),
        -(2**31),
        -(2**63),
        0.10000000149011612,
        float("nan"),
        Decimal("-9999999999.99"),
        Decimal("9999999999999999999999999999.9999999999"),
        Decimal("12345678901234567890.123456789"),
        SCRIPTS,
        b"\x00\xff",
        INFINITY,
        time(0, 0),
        MINUS_INFINITY,
        INFINITY,
        uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        JSON_NULL,
        '{"a b","c\\"d",NULL,""}',
        "{1,NULL,-3}",
    ),
    (
        2,
        False,
        2**15 - 1,
        2**31 - 1,
        2**63 - 1,
        float("inf"),
        -0.0,
        Decimal("0.00"),
        Decimal("-0.0000000001"),
        Decimal("-1E+40"),
        "",
        b"",
        date(1, 1, 1),
        time(23, 59, 59, 999999),
        datetime(9999, 12, 31, 23, 59, 59, 999999),
        datetime(1970, 1, 1, tzinfo=UTC),
        uuid.UUID(int=0),
        {"big": 12345678901234567890, "exact": 0.1, "nested": [1, "two", None, True], "u": "ü"},
        "{}",
        "{}",
    ),
    (3, *([None] * (len(EDGE_COLUMNS) - 1))),
    (
        4,
        None,
        None,
        None,
        None,
        float("-inf"),
        float("inf"),
        None,
        None,
        Decimal("NaN"),
        "x" * 100_000,
        None,
        MINUS_INFINITY,
        None,
        INFINITY,
        MINUS_INFINITY,
        None,
        [],
        None,
        None,
    ),
]


def same(got: Any, want: Any) -> bool:
    if isinstance(want, float) and math.isnan(want):
        return isinstance(got, float) and math.isnan(got)
    if isinstance(want, float) and want == 0.0:
        return got == 0.0 and math.copysign(1, got) == math.copysign(1, want)
    if isinstance(want, Decimal) and want.is_nan():
        return isinstance(got, Decimal) and got.is_nan()
    return bool(got == want) and type(got) is type(want)


async def test_every_type_round_trips_value_by_value_with_its_edges(tmp_path: Path) -> None:
    path = tmp_path / "edges.duckdb"
    await write(path, "edges", EDGE_COLUMNS, EDGE_ROWS, WriteMode.APPEND, ("id",))
    assert types_of(path, "edges") == {
        "id": "INTEGER",
        "flag": "BOOLEAN",
        "small": "SMALLINT",
        "whole": "INTEGER",
        "big": "BIGINT",
        "ratio": "FLOAT",
        "x": "DOUBLE",
        "amount": "DECIMAL(12,2)",
        "wide": "DECIMAL(38,10)",
        "exact": "VARCHAR",
        "name": "VARCHAR",
        "blob": "BLOB",
        "born": "DATE",
        "alarm": "TIME",
        "seen": "TIMESTAMP",
        "stamped": "TIMESTAMP WITH TIME ZONE",
        "ident": "UUID",
        "doc": "JSON",
        "tags": "VARCHAR[]",
        "counts": "INTEGER[]",
    }
    conn = await PROVIDER.connect({"path": str(path)})
    try:
        (stream,) = await conn.discover()
        got = [row async for batch in conn.read(stream, 3) for row in batch]
    finally:
        await conn.close()
    assert stream.primary_key == ("id",)
    assert [(c.name, c.type, c.sql_type) for c in stream.columns] == [
        (c.name, c.type, c.sql_type.replace("character varying(20)", "")) for c in EDGE_COLUMNS
    ]
    assert [c.nullable for c in stream.columns] == [False] + [True] * (len(EDGE_COLUMNS) - 1)
    assert len(got) == len(EDGE_ROWS)
    for got_row, want_row in zip(got, EDGE_ROWS, strict=True):
        for column, g, w in zip(EDGE_COLUMNS, got_row, want_row, strict=True):
            assert same(g, w), (want_row[0], column.name, g, w)


async def test_a_struct_and_a_map_read_as_json_and_unsigned_wide_integers_as_numeric(
    tmp_path: Path,
) -> None:
    path = tmp_path / "other.duckdb"
    with duckdb.connect(str(path)) as db:
        db.execute(
            "CREATE TABLE o (s STRUCT(a INTEGER, b VARCHAR), m MAP(VARCHAR, INTEGER), "
            "u UBIGINT, h HUGEINT, iv INTERVAL, e ENUM('x', 'y'))"
        )
        db.execute(
            "INSERT INTO o VALUES ({'a': 1, 'b': 'ü'}, MAP {'k': 2}, 18446744073709551615, "
            "-170141183460469231731687303715884105728, INTERVAL 3 DAY, 'y')"
        )
    conn = await PROVIDER.connect({"path": str(path)})
    try:
        (stream,) = await conn.discover()
        (row,) = await conn.preview(stream, 10)
    finally:
        await conn.close()
    assert [(c.type, c.sql_type) for c in stream.columns] == [
        ("json", ""),
        ("json", ""),
        ("numeric", "numeric(20,0)"),
        ("numeric", "numeric(39,0)"),
        ("text", ""),
        ("text", ""),
    ]
    assert row == (
        {"a": 1, "b": "ü"},
        {"k": 2},
        Decimal(2**64 - 1),
        Decimal(-(2**127)),
        "3 days",
        "y",
    )


@pytest.mark.parametrize(
    ("column", "value", "reason"),
    [
        (Column("v", "numeric", True, "numeric(5,2)"), Decimal("1.234"), "DECIMAL"),
        (Column("v", "numeric", True, "numeric(5,2)"), Decimal("NaN"), "DECIMAL"),
        (Column("v", "smallint"), 2**15, "SMALLINT"),
        (Column("v", "text"), "lone \ud800 surrogate", "VARCHAR"),
        (Column("v", "timestamptz"), datetime(2020, 1, 1), "aware"),
        # Arrow would cut it to its date, or take it as UTC: refused instead.
        (Column("v", "date"), datetime(2020, 1, 1, 5), "not a date"),
        (Column("v", "timestamp"), datetime(2020, 1, 1, tzinfo=UTC), "naive"),
        (Column("v", "json"), float("nan"), "JSON"),
    ],
)
async def test_a_value_that_does_not_fit_is_a_value_fault_naming_column_and_row(
    tmp_path: Path, column: Column, value: Any, reason: str
) -> None:
    path = tmp_path / "bad.duckdb"
    columns = [Column("id", "integer"), column]
    with pytest.raises(ValueFault, match=reason) as caught:
        await write(path, "t", columns, [(1, None), (2, value)])
    assert (caught.value.column, caught.value.row) == ("v", 2)
    assert rows_of(path, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 't'") == [(0,)]


# --- write modes -------------------------------------------------------------

KEYED = [Column("id", "integer", False), Column("name", "text"), Column("n", "double")]
BEFORE: Batch = [(1, "a", 1.0), (2, "b", None), (3, "c", float("nan"))]
# 1 unchanged, 2 updated (NULL → 2.0), 3 unchanged (NaN is NaN), 4 new.
INCOMING: Batch = [(1, "a", 1.0), (2, "b", 2.0), (3, "c", float("nan")), (4, "d", 4.0)]


@pytest.mark.parametrize(
    ("mode", "after", "counts"),
    [
        (
            WriteMode.APPEND,
            None,
            RowChanges(4),
        ),
        (
            WriteMode.OVERWRITE,
            [(1, "a", 1.0), (2, "b", 2.0), (3, "c", "nan"), (4, "d", 4.0)],
            RowChanges(4),
        ),
        (
            WriteMode.UPSERT,
            [(1, "a", 1.0), (2, "b", 2.0), (3, "c", "nan"), (4, "d", 4.0)],
            RowChanges(1, 1, 2),
        ),
        (
            WriteMode.MERGE,
            [(2, "b", 2.0), (4, "d", 4.0)],
            RowChanges(1, 1, 1, 1),
        ),
    ],
)
async def test_each_write_mode_with_its_exact_counts(
    tmp_path: Path, mode: WriteMode, after: list[Any] | None, counts: RowChanges
) -> None:
    path = tmp_path / "modes.duckdb"
    await write(path, "t", KEYED, BEFORE, WriteMode.APPEND, ("id",) if mode.needs_key else ())
    incoming = INCOMING if mode is not WriteMode.MERGE else [INCOMING[1], INCOMING[3]]
    if mode is WriteMode.MERGE:
        # 1 and 3 leave the source (1 deleted… 3 too): of the target, 2 is updated, 4 new.
        incoming = [(2, "b", 2.0), (4, "d", 4.0), (1, "a", 1.0)]
        after = [(1, "a", 1.0), (2, "b", 2.0), (4, "d", 4.0)]
    key = ("id",) if mode.needs_key else ()
    written = await write(path, "t", KEYED, incoming, mode, key)
    assert changes_of(written) == counts
    assert written == len(incoming)
    rows = rows_of(path, "SELECT id, name, CAST(n AS VARCHAR) FROM t")
    if mode is WriteMode.APPEND:
        assert len(rows) == len(BEFORE) + len(INCOMING)
    else:
        assert sorted(rows, key=lambda r: r[0]) == [
            (i, s, None if v is None else str(v)) for i, s, v in after or []
        ]


async def test_a_key_written_twice_lands_its_last_row_and_counts_each_row(tmp_path: Path) -> None:
    path = tmp_path / "twice.duckdb"
    written = await write(
        path, "t", KEYED, [(1, "a", 1.0), (1, "b", 2.0)], WriteMode.UPSERT, ("id",)
    )
    assert changes_of(written) == RowChanges(1, 1, 0)
    assert rows_of(path, "SELECT * FROM t") == [(1, "b", 2.0)]


async def test_keyed_modes_need_a_key_that_is_written(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs a key"):
        await write(tmp_path / "k.duckdb", "t", KEYED, [], WriteMode.UPSERT, ())
    with pytest.raises(ConfigError, match="not written"):
        await write(tmp_path / "k.duckdb", "t", KEYED, [], WriteMode.MERGE, ("nope",))


async def test_a_duplicate_key_under_append_is_permanent_with_postgres_hint(
    tmp_path: Path,
) -> None:
    path = tmp_path / "dup.duckdb"
    await write(path, "t", KEYED, BEFORE, WriteMode.APPEND, ("id",))
    with pytest.raises(PermanentError, match="use write_mode upsert or overwrite") as caught:
        await write(path, "t", KEYED, [(1, "again", None)], WriteMode.APPEND, ("id",))
    assert not isinstance(caught.value, TransientError)
    assert rows_of(path, "SELECT count(*) FROM t") == [(3,)]


@pytest.mark.parametrize("mode", list(WriteMode))
async def test_a_failure_mid_write_leaves_rows_and_shape_as_they_were(
    tmp_path: Path, mode: WriteMode
) -> None:
    path = tmp_path / "atomic.duckdb"
    await write(path, "t", KEYED, BEFORE, WriteMode.APPEND, ("id",))
    added = Column("extra", "text")
    columns = [*KEYED, added]
    conn = await connect(path)
    try:
        with pytest.raises(RuntimeError, match="broke"):
            await conn.write(
                "t",
                columns,
                failing_after([(9, "z", 9.0, "e")], [(12, "new", 0.0, "e")]),
                mode,
                ("id",),
                marker=LoadMarker("run-1", "t"),
                changes=SchemaChanges("t", None, (added,)),
            )
    finally:
        await conn.close()
    assert types_of(path, "t") == {"id": "INTEGER", "name": "VARCHAR", "n": "DOUBLE"}
    assert rows_of(path, "SELECT id, name FROM t ORDER BY id") == [(1, "a"), (2, "b"), (3, "c")]
    assert rows_of(path, f"SELECT count(*) FROM duckdb_tables() WHERE table_name = '{MARKERS}'")[
        0
    ] == (0,)


async def test_a_failed_write_leaves_no_created_table(tmp_path: Path) -> None:
    path = tmp_path / "none.duckdb"
    conn = await connect(path)
    try:
        with pytest.raises(RuntimeError):
            await conn.write("new", KEYED, failing_after([(1, "a", 1.0)]), WriteMode.APPEND, ())
    finally:
        await conn.close()
    assert rows_of(path, "SELECT count(*) FROM duckdb_tables()") == [(0,)]


async def test_schema_changes_add_columns_in_the_write(tmp_path: Path) -> None:
    path = tmp_path / "evolve.duckdb"
    await write(path, "t", KEYED, BEFORE, WriteMode.APPEND, ("id",))
    added = (Column("note", "text"), Column("price", "numeric", True, "numeric(9,3)"))
    columns = [*KEYED, *added]
    written = await write(
        path,
        "t",
        columns,
        [(1, "a", 1.0, "hi", Decimal("1.500"))],
        WriteMode.UPSERT,
        ("id",),
        changes=SchemaChanges("t", None, added),
    )
    assert changes_of(written) == RowChanges(0, 1, 0)
    assert types_of(path, "t")["price"] == "DECIMAL(9,3)"
    assert rows_of(path, "SELECT note, price FROM t WHERE id = 1") == [("hi", Decimal("1.500"))]


async def test_a_write_with_a_schema_lands_there(tmp_path: Path) -> None:
    path = tmp_path / "schemas.duckdb"
    await write(path, "t", KEYED, BEFORE, schema="lake")
    assert rows_of(path, "SELECT count(*) FROM lake.t") == [(3,)]
    conn = await PROVIDER.connect({"path": str(path), "schema": "lake"})
    try:
        assert [s.name for s in await conn.discover()] == ["t"]
    finally:
        await conn.close()


async def test_a_column_the_table_lacks_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "lack.duckdb"
    await write(path, "t", KEYED, BEFORE)
    with pytest.raises(PermanentError, match="no column 'other'"):
        await write(path, "t", [*KEYED, Column("other", "text")], [(5, "e", 5.0, "o")])


# --- markers -----------------------------------------------------------------


@pytest.mark.parametrize("mode", list(WriteMode))
async def test_a_marked_write_happens_once(tmp_path: Path, mode: WriteMode) -> None:
    path = tmp_path / "once.duckdb"
    marker = LoadMarker("run-7", "t")
    first = await write(path, "t", KEYED, INCOMING, mode, ("id",), marker=marker)
    again = await write(path, "t", KEYED, INCOMING, mode, ("id",), marker=marker)
    assert (first, again) == (4, 4)
    assert changes_of(again) is None  # nothing written: no changes to report
    assert rows_of(path, "SELECT count(*) FROM t") == [(4,)]
    assert rows_of(path, f"SELECT run_id, stream, part, rows FROM {MARKERS}") == [
        ("run-7", "t", "", 4)
    ]
    conn = await PROVIDER.connect({"path": str(path)})
    try:
        assert [s.name for s in await conn.discover()] == ["t"]
    finally:
        await conn.close()


# --- reads -------------------------------------------------------------------


async def test_reads_in_batches_and_counts_rows(tmp_path: Path) -> None:
    path = tmp_path / "read.duckdb"
    await write(path, "t", KEYED, [(i, str(i), float(i)) for i in range(10)])
    conn = await PROVIDER.connect({"path": str(path)})
    try:
        (stream,) = await conn.discover()
        sizes = [len(b) async for b in conn.read(stream, 4)]
        assert sizes == [4, 4, 2]
        assert conn.rows_read == 10  # type: ignore[attr-defined]
        assert stream.row_estimate == 10
    finally:
        await conn.close()


async def test_an_incremental_read_by_cursor(tmp_path: Path) -> None:
    path = tmp_path / "inc.duckdb"
    columns = [Column("id", "integer"), Column("at", "timestamptz")]
    rows = [(i, datetime(2020, 1, i, tzinfo=UTC)) for i in range(1, 6)]
    await write(path, "t", columns, rows)
    conn = await PROVIDER.connect({"path": str(path)})
    try:
        (stream,) = await conn.discover()
        since = Since("at", "timestamptz", low="2020-01-03 00:00:00+00", inclusive=False)
        windowed = Stream(stream.name, stream.columns, since=since)
        high, count = await conn.cursor_high(windowed)  # type: ignore[attr-defined]
        assert (high, count) == ("2020-01-05 00:00:00+00", 2)
        bounded = Since(since.cursor, since.cursor_type, since.low, high="2020-01-04 00:00:00+00")
        bounded_stream = Stream("t", stream.columns, since=bounded)
        got = [r async for b in conn.read(bounded_stream, 10) for r in b]
        assert got == [(3, rows[2][1]), (4, rows[3][1])]  # inclusive low, bounded high
    finally:
        await conn.close()


READER = """
import sys, duckdb
print(duckdb.connect(sys.argv[1], read_only=True).execute("SELECT count(*) FROM t").fetchone()[0])
"""


async def test_a_source_is_opened_read_only(tmp_path: Path) -> None:
    path = tmp_path / "ro.duckdb"
    await write(path, "t", KEYED, BEFORE)
    conn = await PROVIDER.connect({"path": str(path)})
    try:
        # Another process may read it beside this connection: no write lock taken.
        beside = await asyncio.create_subprocess_exec(
            sys.executable, "-c", READER, str(path), stdout=asyncio.subprocess.PIPE
        )
        out, _ = await beside.communicate()
        assert (beside.returncode, out) == (0, b"3\n")
    finally:
        await conn.close()


# --- cancellation and the write lock -----------------------------------------


async def test_a_cancelled_write_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "cancel.duckdb"
    await write(path, "t", KEYED, BEFORE, WriteMode.APPEND, ("id",))
    reached = asyncio.Event()
    never = asyncio.Event()

    async def stalls() -> AsyncIterator[Batch]:
        yield [(10, "x", 1.0)]
        reached.set()
        await never.wait()
        yield [(11, "y", 1.0)]

    conn = await connect(path)
    try:
        marker = LoadMarker("r", "t")
        task = asyncio.create_task(
            conn.write("t", KEYED, stalls(), WriteMode.OVERWRITE, ("id",), marker=marker)
        )
        await reached.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        await conn.close()
    assert rows_of(path, "SELECT id FROM t ORDER BY id") == [(1,), (2,), (3,)]
    assert rows_of(path, f"SELECT count(*) FROM duckdb_tables() WHERE table_name = '{MARKERS}'")[
        0
    ] == (0,)


HOLDER = """
import sys, duckdb
db = duckdb.connect(sys.argv[1])
print("open", flush=True)
sys.stdin.read()
"""


async def test_a_file_another_process_holds_is_transient_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "held.duckdb"
    await write(path, "t", KEYED, BEFORE)
    holder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        HOLDER,
        str(path),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and await holder.stdout.readline() == b"open\n"
        with pytest.raises(TransientError, match="another process has it open for writing") as e:
            await PROVIDER.connect({"path": str(path)})
        assert str(path) in str(e.value)
        with pytest.raises(TransientError, match="another process"):
            await write(path, "t", KEYED, [(9, "z", 1.0)])
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        await holder.wait()
    assert rows_of(path, "SELECT count(*) FROM t") == [(3,)]


# --- hostile names and the sandbox -------------------------------------------


async def test_hostile_names_are_identifiers_not_sql(tmp_path: Path) -> None:
    path = tmp_path / "hostile.duckdb"
    secret = tmp_path / "secret.csv"
    secret.write_text("token\nhunter2\n")
    table = f"t\" AS (SELECT * FROM read_csv('{secret}')); --"
    column = f"c\"); ATTACH '{tmp_path / 'other.duckdb'}' AS o; --"
    columns = [Column("id", "integer"), Column(column, "text")]
    written = await write(path, table, columns, [(1, "v")], WriteMode.UPSERT, ("id",))
    assert written == 1
    conn = await PROVIDER.connect({"path": str(path)})
    try:
        (stream,) = await conn.discover()
        assert (stream.name, stream.column_names) == (table, ["id", column])
        assert await conn.preview(stream, 5) == [(1, "v")]
    finally:
        await conn.close()
    assert not (tmp_path / "other.duckdb").exists()


async def test_the_session_cannot_read_other_files_or_load_extensions(tmp_path: Path) -> None:
    path = tmp_path / "box.duckdb"
    (tmp_path / "secret.csv").write_text("token\nhunter2\n")
    conn = await connect(path)
    try:
        session: duckdb.DuckDBPyConnection = conn._conn  # type: ignore[attr-defined]
        with pytest.raises(duckdb.PermissionException):
            session.execute(f"SELECT * FROM read_csv('{tmp_path / 'secret.csv'}')")
        with pytest.raises(duckdb.PermissionException):
            session.execute(f"ATTACH '{tmp_path / 'other.duckdb'}' AS o")
        with pytest.raises(duckdb.Error):
            session.execute("LOAD httpfs")
        with pytest.raises(duckdb.InvalidInputException, match="locked"):
            session.execute("SET enable_external_access = true")
    finally:
        await conn.close()


# --- the cloud policy --------------------------------------------------------

WORKSPACE = str(uuid.UUID(int=7))


def test_the_cloud_confines_path_to_the_workspace_folder(tmp_path: Path) -> None:
    policy = CloudPolicy(tmp_path).for_workspace(WORKSPACE)
    home = tmp_path / WORKSPACE
    placed = policy("duckdb", {"path": "lake.duckdb", "create": True})
    assert placed == {"path": str(home / "lake.duckdb"), "create": True}
    for outside in ("/etc/lake.duckdb", "../other/lake.duckdb", str(tmp_path / "x.duckdb")):
        with pytest.raises(ConfigError, match=r"config\.path: a cloud connection may only use"):
            policy("duckdb", {"path": outside})
    (home / "out").symlink_to(tmp_path.parent)
    with pytest.raises(ConfigError, match=r"config\.path"):
        policy("duckdb", {"path": "out/lake.duckdb"})


async def test_a_cloud_connection_opens_no_file_outside_its_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(ConfigError, match="only use files under"):
        await PROVIDER.connect({"path": str(tmp_path / "x.duckdb"), "create": True}, root=root)
    assert not (tmp_path / "x.duckdb").exists()


def test_local_reach_places_a_relative_path_in_the_workspace_folder(tmp_path: Path) -> None:
    reach = LocalReach(tmp_path).for_workspace(WORKSPACE)
    assert reach("duckdb", {"path": "lake.duckdb"}) == {
        "path": str(tmp_path / WORKSPACE / "lake.duckdb")
    }
    assert reach("duckdb", {"path": "/data/lake.duckdb"}) == {"path": "/data/lake.duckdb"}


async def test_two_connectors_of_one_process_share_the_file_set_up_alike(tmp_path: Path) -> None:
    path = tmp_path / "shared.duckdb"
    columns = [Column("id", "integer"), Column("at", "timestamptz")]
    await write(path, "t", columns, [(1, datetime(2020, 1, 1, tzinfo=UTC))])
    first = await PROVIDER.connect({"path": str(path)})
    second = await PROVIDER.connect({"path": str(path)})
    try:
        (stream,) = await second.discover()
        assert await second.preview(stream, 1) == [(1, datetime(2020, 1, 1, tzinfo=UTC))]
        # DuckDB shares one instance per file and process: a writer cannot
        # open it beside readers until they close, and is told so.
        with pytest.raises(TransientError, match="open in this runtime by another connection"):
            await write(path, "t", columns, [])
    finally:
        await first.close()
        await second.close()
    assert await write(path, "t", columns, [(2, None)]) == 1


# --- resumable staged loads --------------------------------------------------


def tables_in(path: Path) -> set[str]:
    return {str(r[0]) for r in rows_of(path, "SELECT table_name FROM duckdb_tables()")}


async def test_a_staged_load_resumes_by_part_and_applies_once(tmp_path: Path) -> None:
    from setu_engine.operators.chain import Chain
    from setu_engine.staged.markers import LoadIdentity
    from setu_engine.staged.resumable import Target, part_marker, stage_marker, stage_table

    path = tmp_path / "staged.duckdb"
    await write(path, "t", KEYED, BEFORE, WriteMode.APPEND, ("id",))
    run = LoadIdentity("run-s")
    stage = stage_table(run.run_id, "t")
    plan = Chain().plan(KEYED)
    target = Target("t", None, plan, WriteMode.UPSERT, ("id",))
    conn = await connect(path)
    dest: Any = conn
    try:
        await dest.prepare_stage(stage, KEYED, None, stage_marker(run.run_id, "t"))
        assert await dest.stage_part(stage, KEYED, INCOMING[:2], part_marker(run, "t", 0), None)
        # A retry of part 0 copies nothing; part 1 goes on.
        assert not await dest.stage_part(stage, KEYED, INCOMING[:2], part_marker(run, "t", 0), None)
        assert await dest.stage_part(stage, KEYED, INCOMING[2:], part_marker(run, "t", 1), None)

        async def cancelled() -> None:
            raise asyncio.CancelledError

        with pytest.raises(asyncio.CancelledError):
            await dest.apply_stage(stage, KEYED, target, run.marker("t"), cancelled)
        assert await dest.marked(run.marker("t")) is None

        async def nothing() -> None:
            return None

        written = await dest.apply_stage(stage, KEYED, target, run.marker("t"), nothing)
        assert (int(written), changes_of(written)) == (4, RowChanges(1, 1, 2))
        again = await dest.apply_stage(stage, KEYED, target, run.marker("t"), nothing)
        assert int(again) == 4 and changes_of(again) is None
    finally:
        await conn.close()
    assert rows_of(path, "SELECT count(*) FROM t") == [(4,)]
    assert stage not in tables_in(path), "the apply drops its staging table"
    assert rows_of(path, f"SELECT part FROM {MARKERS} WHERE part = 'stage'") == []


async def test_another_runs_stale_stage_is_found_and_dropped(tmp_path: Path) -> None:
    from datetime import timedelta

    from setu_engine.staged.markers import LoadIdentity
    from setu_engine.staged.resumable import part_marker, stage_marker, stage_table

    path = tmp_path / "stale.duckdb"
    gone, current = LoadIdentity("gone"), LoadIdentity("current")
    stage = stage_table(gone.run_id, "t")
    conn = await connect(path)
    dest: Any = conn
    try:
        await dest.prepare_stage(stage, KEYED, None, stage_marker(gone.run_id, "t"))
        assert await dest.stage_part(stage, KEYED, BEFORE, part_marker(gone, "t", 0), None)
        assert await dest.stale_stages(current.run_id, timedelta(hours=1)) == []
        (stale,) = await dest.stale_stages(current.run_id, timedelta(0))
        assert (stale.run_id, stale.stream, stale.part) == ("gone", "t", "stage")
        assert await dest.stale_stages(gone.run_id, timedelta(0)) == []
        assert [s.name for s in await conn.discover()] == [], "staging tables are no streams"
        await dest.drop_stage(stage, stale)
        assert await dest.marked(part_marker(gone, "t", 0)) is None
    finally:
        await conn.close()
    assert stage not in tables_in(path)


async def test_discover_offers_tables_and_views_of_the_schema_only(tmp_path: Path) -> None:
    path = tmp_path / "views.duckdb"
    with duckdb.connect(str(path)) as db:
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name VARCHAR NOT NULL)")
        db.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
        db.execute("CREATE VIEW v AS SELECT id FROM t WHERE id > 1")
        db.execute("CREATE SCHEMA other")
        db.execute("CREATE TABLE other.elsewhere (x INTEGER)")
    conn = await PROVIDER.connect({"path": str(path)})
    try:
        streams = {s.name: s for s in await conn.discover()}
        assert sorted(streams) == ["t", "v"]
        want = (Column("id", "integer", False), Column("name", "text", False))
        assert streams["t"].columns == want
        assert [r async for b in conn.read(streams["v"], 10) for r in b] == [(2,)]
    finally:
        await conn.close()
