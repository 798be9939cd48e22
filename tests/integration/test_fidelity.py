"""Data fidelity: a table of edge values moves through every provider pair
(postgres, sqlite, JSON Lines, CSV) on both paths (direct and staged), and
what lands is read back and compared with the source value by value.

Every difference must be a documented limitation of the destination's
format: LIMITATIONS below, each a phrase of docs/data-types.md's "Known
limitations". The test asserts that exactly those differences occur, so a
limitation that is fixed (or a new loss) fails it, naming what to update.

A source other than PostgreSQL is what the PostgreSQL → that format move
left behind, read back through Setu's own reader: the chain postgres → X → Y
checks that every format reads its own spellings back.

Another format joins by adding an entry to DESTINATIONS (and, if it loses
anything, to LIMITATIONS and the doc). A format that refuses some values
(Parquet: no NaN decimal, no infinite date) lists them in REFUSED: the
pairs through it move the edge table without those cells, and each refused
cell is asserted on its own to fail the move naming stream, column and row.
"""

from __future__ import annotations

import json
import math
import pprint
import struct
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from decimal import Decimal, localcontext
from pathlib import Path
from typing import Any

import asyncpg
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from setu_engine.errors import ValueFault
from setu_engine.kinds import WriteMode
from setu_engine.movement import transfer
from setu_engine.operators.chain import parse_spec
from setu_engine.providers import get_provider
from setu_engine.providers.base import Connector
from setu_engine.providers.files import arrays as pgarrays
from setu_engine.providers.files import parquet as files_parquet
from setu_engine.staged.blob import LocalBlobStore
from setu_engine.staged.markers import LoadIdentity
from setu_engine.values.special import INFINITY, JSON_NULL, MINUS_INFINITY
from setu_engine.values.types import Column, Row, Stream
from tests.databases import postgres_config, scratch_database

DOC = Path(__file__).resolve().parents[2] / "docs" / "data-types.md"

SOURCE_DDL = """
CREATE TABLE edge (
    id integer PRIMARY KEY,
    b boolean, i2 smallint, i4 integer, i8 bigint,
    r real, d double precision, n numeric, n2 numeric(40, 10),
    t text, vc varchar(40), by bytea,
    dt date, tm time, ts timestamp, tz timestamptz,
    u uuid, jb jsonb, js json,
    ai integer[], at text[]
)"""

# One row per theme; NULL wherever a row says nothing. Values are SQL
# literals, so PostgreSQL itself parses them (and its text is the truth).
ROWS: list[dict[str, str]] = [
    {"id": "1"},  # every column NULL
    {
        "id": "2",
        "b": "true",
        "i2": "-32768",
        "i4": "2147483647",
        "i8": "-9223372036854775808",
        "r": "0.01",
        "d": "0.1",
        "n": "1.10",
        "n2": "-12.3400000000",
        "t": "'plain'",
        "vc": "'varchar'",
        "by": "'\\x00010203'::bytea",
        "dt": "'2024-02-29'",
        "tm": "'23:59:59.999999'",
        "ts": "'2024-01-02 03:04:05.000006'",
        "tz": "'2024-01-02 03:04:05.000006+05:30'",
        "u": "'12345678-1234-5678-1234-567812345678'",
        "jb": """'{"a": [1, "two", null], "é": {"x": true}}'""",
        "js": """'[1, 2.5, "three"]'""",
        "ai": "'{1,NULL,3}'",
        "at": """'{"a",NULL,"","b,c"}'""",
    },
    {
        "id": "3",  # NaN, +infinity, empty values, JSON null
        "r": "'NaN'",
        "d": "'NaN'",
        "n": "'NaN'",
        "t": "''",
        "vc": "''",
        "by": "''::bytea",
        "dt": "'infinity'",
        "ts": "'infinity'",
        "tz": "'infinity'",
        "jb": "'null'",
        "js": "'null'",
        "ai": "'{}'",
        "at": "'{NULL}'",
    },
    {
        "id": "4",  # -infinity, -0, 30-digit numerics, unicode
        "r": "'-Infinity'",
        "d": "'-0'",
        "n": "'-Infinity'",
        "n2": "'123456789012345678901234567890.0123456789'",
        "t": "'emoji 🚀👩‍👩‍👧 and e\u0301 combining, 日本語'",
        "vc": "'tab\tnewline\nquote\" comma, semicolon;'",
        "by": "'\\x00ff00'::bytea",
        "dt": "'-infinity'",
        "ts": "'-infinity'",
        "tz": "'-infinity'",
        "jb": """'{"a": null}'""",
        "js": """'"a string"'""",
    },
    {
        "id": "5",  # +Infinity, subnormals, tiny numerics, zones
        "r": "'1e-45'",
        "d": "'5e-324'",
        "n": "'Infinity'",
        "n2": "'-0.0000000001'",
        "t": "'NULL'",
        "vc": "'\\N'",
        "dt": "'0001-01-01'",
        "tm": "'00:00:00'",
        "ts": "'0001-01-01 00:00:00'",
        "tz": "'1999-12-31 23:59:59.999999-08:00'",
        "jb": "'0'",
        "js": "'{}'",
    },
    {
        "id": "6",  # extremes and float4 digits
        "r": "'3.4028235e38'",
        "d": "'-1.7976931348623157e308'",
        "n": "'0.000000000000000000000000000001'",
        "t": "' leading and trailing spaces '",
        "dt": "'9999-12-31'",
        "ts": "'9999-12-31 23:59:59.999999'",
        "tz": "'2030-06-15 12:00:00.123456+14:00'",
        "jb": """'"text"'""",
        "js": """'{"big": 1.00000000000000000001}'""",
    },
    {
        "id": "7",  # -0 of a real, and more float4 digits
        "r": "'-0'",
        "d": "'Infinity'",
        "n": "'-1234567890123456789012345678.90'",
        "t": "'comma, \"quote\", and\nnewline'",
        "tz": "'2024-03-10 02:30:00.5+00'",
        "jb": """'{"nested": {"deep": [[], {}, ""]}}'""",
    },
]

# Differences a format is allowed (and required) to show, by the phrase of
# docs/data-types.md that documents each.
EMPTY_IS_NULL = "the empty string reads back as NULL"
NEGATIVE_ZERO = "`-0` of a real or double reads back as `0`"
JSON_NUMBERS = "numbers inside a json value travel as doubles"
NUMERIC_SCALE = "a bare `numeric` reads back without its trailing zeros"

LIMITATIONS: dict[str, set[str]] = {
    "postgres": set(),
    "sqlite": {NEGATIVE_ZERO},
    "jsonl": set(),
    "csv": {EMPTY_IS_NULL},
    "parquet": {NUMERIC_SCALE},
}
# Also documented, and tested on its own (the comparison above cannot see it:
# Setu reads the PostgreSQL source's json through the same decoder).
SEPARATE = {JSON_NUMBERS}


# -- ends ------------------------------------------------------------------------


@dataclass
class End:
    """One provider's connection, and how to find the edge table in it."""

    provider: str
    config: dict[str, Any]
    url: str = ""  # a PostgreSQL end's, for checks outside Setu

    async def connect(self) -> Connector:
        return await get_provider(self.provider).connect(self.config)

    async def rows(self, like: Stream) -> tuple[list[Column], list[Row]]:
        """The edge table read back through Setu: by discover for a database;
        a text file is read as the source's columns (as a user declares them);
        Parquet, by its own schema."""
        connector = await self.connect()
        try:
            if "columns" in self.config:
                stream = Stream("edge", like.columns)
            else:
                (stream,) = [s for s in await connector.discover() if s.name == "edge"]
            rows = [row async for batch in connector.read(stream, 3) for row in batch]
            # As the file's connector presents its columns (declared types).
            shown = await connector.discover() if "columns" in self.config else [stream]
        finally:
            await connector.close()
        (columns,) = [s.columns for s in shown if s.name == "edge"]
        return list(columns), sorted(rows, key=lambda row: row[0])


def file_end(folder: Path, fmt: str, like: Stream | None = None) -> End:
    folder.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {"url": str(folder), "format": fmt}
    if like is not None and fmt != "parquet":
        config["columns"] = {"edge": {c.name: c.type for c in like.columns}}
    return End("file", config)


@dataclass
class Places:
    tmp: Path
    scratch: Callable[[], Awaitable[str]]

    async def end(self, kind: str, label: str, like: Stream | None = None) -> End:
        folder = self.tmp / label
        if kind == "postgres":
            url = await self.scratch()
            return End("postgres", postgres_config(url), url)
        if kind == "sqlite":
            folder.mkdir(parents=True, exist_ok=True)
            return End("sqlite", {"path": str(folder / "edge.db"), "create": True})
        return file_end(folder, kind, like)


# Values a format refuses, each failing the move (permanently, naming
# stream, column and row): (id, column) → the phrase of docs/data-types.md's
# "Known limitations" that documents it.
PARQUET_NO_NONFINITE_DECIMAL = "a numeric NaN or ±Infinity fails the run"
PARQUET_NO_INFINITE_DATE = "a date or timestamp `infinity` or `-infinity` fails the run"
PARQUET_BARE_NUMERIC = "a bare `numeric` with more than 29 digits before the point or 9 after"
REFUSED: dict[str, dict[tuple[int, str], str]] = {
    "parquet": {
        **{(3, c): PARQUET_NO_INFINITE_DATE for c in ("dt", "ts", "tz")},
        **{(4, c): PARQUET_NO_INFINITE_DATE for c in ("dt", "ts", "tz")},
        **{(i, "n"): PARQUET_NO_NONFINITE_DECIMAL for i in (3, 4, 5)},
        (6, "n"): PARQUET_BARE_NUMERIC,
    },
}
# A file or SQLite origin declares neutral types only, so its n2 reaches
# Parquet as a bare numeric.
BARE_N2 = {(4, "n2"): PARQUET_BARE_NUMERIC, (5, "n2"): PARQUET_BARE_NUMERIC}
UNTYPED_ORIGINS = ("sqlite", "jsonl", "csv")


def refused(origin: str, kind: str) -> dict[tuple[int, str], str]:
    """The cells the origin → kind move refuses (or the origin itself did)."""
    cells = {**REFUSED.get(origin, {}), **REFUSED.get(kind, {})}
    if kind == "parquet" and origin in UNTYPED_ORIGINS:
        cells.update(BARE_N2)
    return cells


# Where each destination lands; a new format adds itself here (and to
# LIMITATIONS, and REFUSED if it refuses values). Places.end makes a file
# end of any file format.
DESTINATIONS = ["postgres", "sqlite", "jsonl", "csv", "parquet"]
SOURCES = ["postgres", "sqlite", "jsonl", "csv", "parquet"]


@pytest.fixture
async def places(pg_server_url: str, tmp_path: Path) -> AsyncIterator[Places]:
    opened: list[Any] = []

    async def scratch() -> str:
        manager = scratch_database(pg_server_url, "setu_fidelity")
        opened.append(manager)
        return await manager.__aenter__()

    yield Places(tmp_path, scratch)
    for manager in reversed(opened):
        await manager.__aexit__(None, None, None)


def without(cells: set[tuple[int, str]]) -> list[dict[str, str]]:
    """ROWS with the given (id, column) cells left NULL."""
    return [{k: v for k, v in row.items() if (int(row["id"]), k) not in cells} for row in ROWS]


async def postgres_source(
    places: Places, rows: list[dict[str, str]] | None = None, label: str = "source"
) -> End:
    end = await places.end("postgres", label)
    conn = await asyncpg.connect(end.url)
    try:
        await conn.execute(SOURCE_DDL)
        for row in ROWS if rows is None else rows:
            names = list(row)
            values = ", ".join(row[k] for k in names)
            await conn.execute(f"INSERT INTO edge ({', '.join(names)}) VALUES ({values})")
    finally:
        await conn.close()
    return end


class Quiet:
    async def extracted(self, stream: str, rows: int) -> None:
        pass

    async def loaded(self, stream: str, rows: int) -> None:
        pass


async def move(
    source: End,
    destination: End,
    path: str,
    blob: Path,
    operators: list[dict[str, Any]] | None = None,
) -> None:
    src = await source.connect()
    dst = await destination.connect()
    spec = parse_spec({"primary_key": {"edge": ["id"]}, "operators": operators or []})
    run = LoadIdentity(str(uuid.uuid4()))
    try:
        streams = transfer.select_streams(await src.discover(), ["edge"])
        if path == "direct":
            await transfer.direct(
                src, dst, streams, spec, WriteMode.OVERWRITE, Quiet(), 3, identity=run
            )
        else:
            store = LocalBlobStore(blob)
            manifest = await transfer.stage(src, streams, store, "run/", Quiet(), 3)
            await transfer.load(
                dst, manifest, store, "run/", spec, WriteMode.OVERWRITE, Quiet(), identity=run
            )
    finally:
        await src.close()
        await dst.close()


# -- comparing -------------------------------------------------------------------


def _float_same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1, a) == math.copysign(1, b)


def _float4(value: float) -> float:
    return float(struct.unpack("!f", struct.pack("!f", value))[0])


def same(column: Column, a: Any, b: Any) -> bool:
    if a is None or b is None or a is JSON_NULL or b is JSON_NULL:
        return a is b
    if isinstance(a, float) and isinstance(b, float):
        if column.type == "real":  # the same float4, however it is carried
            return _float_same(_float4(a), _float4(b))
        return _float_same(a, b)
    if isinstance(a, Decimal) and isinstance(b, Decimal):
        return str(a) == str(b)  # the digits and the scale, NaN included
    if isinstance(a, dict | list) and isinstance(b, dict | list):
        return _json_same(a, b)
    if isinstance(a, uuid.UUID) and isinstance(b, uuid.UUID):
        return a == b  # asyncpg returns a subclass of its own
    return type(a) is type(b) and bool(a == b)


def _json_same(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def classify(column: Column, a: Any, b: Any) -> str:
    """The documented limitation a difference is, or what it is."""
    if a in ("", b"") and b is None:
        return EMPTY_IS_NULL
    if isinstance(a, float) and a == 0.0 and isinstance(b, float) and b == 0.0:
        return NEGATIVE_ZERO
    if isinstance(a, Decimal) and isinstance(b, Decimal) and a.is_finite() and a == b:
        return NUMERIC_SCALE
    return f"undocumented: {column.name} ({column.type}) {a!r} became {b!r}"


def differences(
    source: tuple[list[Column], list[Row]], landed: tuple[list[Column], list[Row]]
) -> dict[str, list[str]]:
    """Each kind of difference, with where it was seen."""
    columns, rows = source
    landed_columns, landed_rows = landed
    found: dict[str, list[str]] = {}
    assert [c.name for c in landed_columns] == [c.name for c in columns]
    for column, other in zip(columns, landed_columns, strict=True):
        if other.type != column.type:
            found.setdefault(f"type of {column.name}", []).append(f"{column.type}→{other.type}")
    assert [r[0] for r in landed_rows] == [r[0] for r in rows]
    for row, back in zip(rows, landed_rows, strict=True):
        for column, a, b in zip(columns, row, back, strict=True):
            if not same(column, a, b):
                found.setdefault(classify(column, a, b), []).append(f"id {row[0]} {column.name}")
    return found


# -- the tests -------------------------------------------------------------------


def test_every_limitation_is_documented() -> None:
    text = DOC.read_text()
    section = text[text.index("## Known limitations") :]
    refusals = {phrase for cells in (*REFUSED.values(), BARE_N2) for phrase in cells.values()}
    for phrase in set().union(*LIMITATIONS.values(), SEPARATE, refusals):
        assert phrase in section, f"docs/data-types.md does not list: {phrase}"


async def test_postgres_reads_its_edge_values_as_postgresql_says(places: Places) -> None:
    """The reference the other tests compare with is right: no clamped
    infinity, float4 digits, JSON null apart from SQL NULL."""
    source = await postgres_source(places)
    _, rows = await source.rows(Stream("edge", ()))
    by_id = {row[0]: row for row in rows}
    names = [c.name for c in (await source.rows(Stream("edge", ())))[0]]

    def value(id_: int, name: str) -> Any:
        return by_id[id_][names.index(name)]

    assert value(2, "r") == _float4(0.01)
    assert [value(3, c) for c in ("dt", "ts", "tz")] == [INFINITY] * 3
    assert [value(4, c) for c in ("dt", "ts", "tz")] == [MINUS_INFINITY] * 3
    assert value(3, "jb") is JSON_NULL and value(1, "jb") is None
    assert value(5, "r") == _float4(1e-45) != 0
    assert str(value(4, "n2")) == "123456789012345678901234567890.0123456789"


Table = tuple[list[Column], list[Row]]


async def chain_source(
    places: Places, origin: str, path: str, omit: frozenset[tuple[int, str]]
) -> tuple[End, Table, Stream]:
    """The edge table (without the `omit` cells) in `origin`: PostgreSQL's,
    or what the PostgreSQL → origin move left behind; with its reference
    rows, read back through Setu."""
    label = "source" + "".join(f"-{i}{c}" for i, c in sorted(omit))
    source = await postgres_source(places, without(set(omit)), label)
    reference = await source.rows(Stream("edge", ()))
    like = Stream("edge", tuple(reference[0]))
    if origin != "postgres":
        first = await places.end(origin, f"origin-{origin}-{label}", like)
        await move(source, first, path, places.tmp / f"blob-origin-{label}")
        source = first
        reference = await source.rows(like)
    return source, reference, like


@pytest.mark.parametrize("path", ["direct", "staged"])
@pytest.mark.parametrize("origin", SOURCES)
async def test_edge_values_survive_every_pair(places: Places, origin: str, path: str) -> None:
    unexpected: dict[str, dict[str, list[str]]] = {}
    sources: dict[frozenset[tuple[int, str]], tuple[End, Table, Stream]] = {}
    for kind in DESTINATIONS:
        # A format that refuses values moves the table without them.
        omit = frozenset(refused(origin, kind))
        if omit not in sources:
            sources[omit] = await chain_source(places, origin, path, omit)
        source, reference, like = sources[omit]
        destination = await places.end(kind, f"to-{kind}", like)
        await move(source, destination, path, places.tmp / f"blob-{kind}")
        landed = await destination.rows(like)
        found = differences(reference, landed)
        if kind == "parquet":
            found.update(_pyarrow_differences(destination, reference))
        allowed = LIMITATIONS[kind] - LIMITATIONS.get(origin, set())
        if set(found) != allowed:
            unexpected[f"{origin} → {kind} ({path})"] = {
                **{k: v for k, v in found.items() if k not in allowed},
                **{
                    f"no longer seen (update docs/data-types.md): {k}": []
                    for k in allowed - set(found)
                },
            }
        if origin == kind == "postgres":
            await _same_text(source.url, destination.url)
    assert not unexpected, pprint.pformat(unexpected, width=120)


def _pyarrow_differences(destination: End, reference: Table) -> dict[str, list[str]]:
    """The Parquet file read by pyarrow itself: the schema the source's
    columns declare, and every value what the source held."""
    (path,) = Path(destination.config["url"]).glob("*.parquet")
    table = pq.read_table(path)
    found: dict[str, list[str]] = {}
    expected = files_parquet.arrow_schema(reference[0])
    for field in expected:
        got = table.schema.field(field.name).type
        if got != field.type:
            found.setdefault("pyarrow: type", []).append(f"{field.name}: {got} != {field.type}")
    rows = sorted(table.to_pylist(), key=lambda r: r["id"])
    columns, reference_rows = reference
    for row, back in zip(reference_rows, rows, strict=True):
        for column, value in zip(columns, row, strict=True):
            arrow = _from_arrow(column, back[column.name])
            if not same(column, value, arrow):
                kind = classify(column, value, arrow)
                found.setdefault(kind if kind == NUMERIC_SCALE else f"pyarrow: {kind}", []).append(
                    f"id {row[0]} {column.name}"
                )
    return found


def _from_arrow(column: Column, value: Any) -> Any:
    """What pyarrow hands back, in the engine's neutral form, converted
    only where Arrow's Python form differs by nature (not by value)."""
    if value is None:
        return None
    if column.type == "json":
        parsed = json.loads(value)
        return JSON_NULL if parsed is None else parsed
    if column.type == "uuid" and isinstance(value, bytes):
        return uuid.UUID(bytes=value)
    if column.type == "timestamptz":
        return value  # aware, in UTC: compared as an instant
    if isinstance(value, list):
        return pgarrays.literal(value)
    if column.type == "numeric" and not column.sql_type:
        # A bare numeric's decimal(38,9) pads the scale: those zeros are Arrow's.
        with localcontext() as context:
            context.prec = 100
            return value.normalize() if value != value.to_integral_value() else value.quantize(1)
    return value


REFUSALS = [
    *[("postgres", "parquet", cell) for cell in REFUSED["parquet"]],
    *[("jsonl", "parquet", cell) for cell in BARE_N2],
]


@pytest.mark.parametrize("path", ["direct", "staged"])
@pytest.mark.parametrize(("origin", "kind", "cell"), REFUSALS)
async def test_a_refused_value_fails_the_move_naming_it(
    places: Places, origin: str, kind: str, cell: tuple[int, str], path: str
) -> None:
    """Each value a format refuses, alone among the values it takes, fails
    the move permanently, naming stream, column and row."""
    others = frozenset(refused(origin, kind)) - {cell}
    source, _, like = await chain_source(places, origin, path, others)
    destination = await places.end(kind, f"refuse-{kind}", like)
    with pytest.raises(ValueFault) as caught:
        await move(source, destination, path, places.tmp / "blob")
    fault = caught.value
    assert fault.retryable is False
    stream = "public.edge" if origin == "postgres" else "edge"
    assert (fault.stream, fault.column, fault.row) == (stream, cell[1], cell[0]), str(fault)


async def _same_text(source_url: str, destination_url: str) -> None:
    """PostgreSQL → PostgreSQL, compared as PostgreSQL prints each value
    (json aside: jsonb staging normalises its spacing)."""
    query = (
        "SELECT id, b::text, i2::text, i4::text, i8::text, r::text, d::text, n::text, "
        "n2::text, t, vc, by::text, dt::text, tm::text, ts::text, tz::text, u::text, "
        "jb::text, ai::text, at::text FROM edge ORDER BY id"
    )
    texts = []
    for url in (source_url, destination_url):
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("SET TimeZone = 'UTC'")
            texts.append([tuple(r) for r in await conn.fetch(query)])
        finally:
            await conn.close()
    assert texts[1] == texts[0]


@pytest.mark.parametrize("kind", ["jsonl", "csv", "sqlite"])
async def test_numbers_inside_json_travel_as_doubles(places: Places, kind: str) -> None:
    """A documented limitation: PostgreSQL keeps a jsonb number's digits;
    outside PostgreSQL, Setu's JSON decoder makes it a double."""
    source = await postgres_source(places)
    like = Stream("edge", tuple((await source.rows(Stream("edge", ())))[0]))
    destination = await places.end(kind, f"json-{kind}", like)
    await move(source, destination, "direct", places.tmp / "blob")
    columns, rows = await destination.rows(like)
    js = [c.name for c in columns].index("js")
    assert {row[0]: row[js] for row in rows}[6] == {"big": 1.0}  # was 1.00000000000000000001


@pytest.mark.parametrize("path", ["direct", "staged"])
async def test_a_date_python_cannot_hold_fails_permanently_naming_it(
    places: Places, path: str
) -> None:
    """A documented limitation of every format but PostgreSQL → PostgreSQL:
    a year past 9999 fails the move, permanently, naming the stream (and,
    where the staged part shows it, the column and row)."""
    source = await places.end("postgres", "far")
    conn = await asyncpg.connect(source.url)
    try:
        await conn.execute(
            "CREATE TABLE edge (id int PRIMARY KEY, d date);"
            "INSERT INTO edge VALUES (1, '2024-01-01'), (2, '10000-01-01')"
        )
    finally:
        await conn.close()
    # (Direct to JSON Lines, PostgreSQL writes the year 10000 itself; here
    # the direct path decodes it, to SQLite.)
    destination = await places.end("jsonl" if path == "staged" else "sqlite", "far-out")
    with pytest.raises(ValueFault, match="date outside Python's years 1-9999") as caught:
        await move(source, destination, path, places.tmp / "blob")
    assert caught.value.stream == "public.edge"
    assert caught.value.retryable is False
    if path == "staged":
        assert (caught.value.column, caught.value.row) == ("d", 2)


@pytest.mark.parametrize("path", ["direct", "staged"])
async def test_operators_take_infinity_and_json_null(places: Places, path: str) -> None:
    """A filter orders infinity after every date, a cast to text spells it,
    JSON null stays a value; a cast that cannot hold infinity fails the
    move permanently naming stream, column and row."""
    source = await postgres_source(places)
    operators: list[dict[str, Any]] = [
        {"op": "filter", "where": "tz > '2000-01-01' or dt = '-infinity' or jb is not null"},
        {"op": "cast", "columns": {"ts": "text", "jb": "text"}},
        {"op": "select", "columns": ["id", "dt", "ts", "jb"]},
    ]
    destination = await places.end("jsonl", "ops")
    await move(source, destination, path, places.tmp / "blob", operators)
    by_id = {line["id"]: line for line in _json_lines(destination)}
    assert sorted(by_id) == [2, 3, 4, 5, 6, 7]  # row 1 is all NULL
    assert by_id[3] == {"id": 3, "dt": "infinity", "ts": "infinity", "jb": "null"}
    assert by_id[4]["ts"] == "-infinity" and by_id[4]["dt"] == "-infinity"

    timed = await places.end("jsonl", "ops-time")
    with pytest.raises(ValueFault) as caught:
        # Row 4 (-infinity), in the second batch of three: rows are counted
        # from the stream's start, filtered ones included.
        cast: list[dict[str, Any]] = [
            {"op": "filter", "where": "id <> 3"},
            {"op": "cast", "columns": {"ts": "time"}},
        ]
        await move(source, timed, path, places.tmp / "blob-time", cast)
    fault = caught.value
    assert fault.retryable is False
    assert (fault.stream, fault.column, fault.row) == ("public.edge", "ts", 4), str(fault)


def _json_lines(end: End) -> list[dict[str, Any]]:
    (landed,) = Path(end.config["url"]).glob("*.jsonl")
    return [json.loads(line) for line in landed.read_text().splitlines()]
