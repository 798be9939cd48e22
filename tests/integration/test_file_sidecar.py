"""Files keep their types (issue 26): a CSV or JSON Lines file Setu writes has
its stream's schema beside it (a sidecar, sidecar.py) that discover reads
back, a Parquet file keeps it in its footer, and without either, inference
never turns an exact decimal into a float."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_engine.errors import ConfigError, PermanentError
from setu_engine.kinds import WriteMode
from setu_engine.movement import transfer
from setu_engine.operators.chain import parse_spec
from setu_engine.providers import get_provider
from setu_engine.providers.files import PROVIDER, sidecar
from setu_engine.staged.blob import LocalBlobStore
from setu_engine.staged.markers import LoadIdentity
from setu_engine.staged.s3 import s3_client
from setu_engine.values.types import Column
from tests.databases import postgres_config, scratch_database
from tests.s3server import S3Endpoint


async def test_jsonl_inference_keeps_a_big_decimal_exact(tmp_path: Path) -> None:
    """A JSON number a double cannot hold infers numeric, read as its exact
    digits; numbers a double holds exactly still infer double."""
    (tmp_path / "money.jsonl").write_text(
        '{"big": 12345678901234567890.123456789, "small": 0.5, "huge": 1e400}\n'
        '{"big": 1.5, "small": 2, "huge": 1}\n'
    )
    connector = await PROVIDER.connect({"url": str(tmp_path), "format": "jsonl"})
    try:
        (stream,) = await connector.discover()
        types = {c.name: c.type for c in stream.columns}
        assert types == {"big": "numeric", "small": "double", "huge": "numeric"}
        rows = [row async for batch in connector.read(stream, 10) for row in batch]
    finally:
        await connector.close()
    assert rows[0][0] == Decimal("12345678901234567890.123456789")
    assert str(rows[0][0]) == "12345678901234567890.123456789"
    assert rows[0][2] == Decimal("1e400")


async def test_csv_inference_keeps_a_big_decimal_exact(tmp_path: Path) -> None:
    """CSV infers a decimal numeric (exact), an integer past bigint numeric."""
    (tmp_path / "money.csv").write_text(
        "big,wide\n12345678901234567890.123456789,99999999999999999999\n1.5,1\n"
    )
    connector = await PROVIDER.connect({"url": str(tmp_path), "format": "csv"})
    try:
        (stream,) = await connector.discover()
        assert [c.type for c in stream.columns] == ["numeric", "numeric"]
        rows = [row async for batch in connector.read(stream, 10) for row in batch]
    finally:
        await connector.close()
    assert str(rows[0][0]) == "12345678901234567890.123456789"
    assert rows[0][1] == Decimal("99999999999999999999")


async def test_parquet_keeps_the_primary_key_in_its_metadata(tmp_path: Path) -> None:
    """A Parquet file written with a key offers it back on discover, with
    its columns' SQL types and nullability."""

    columns = [
        Column("id", "integer", nullable=False),
        Column("name", "text", nullable=False, sql_type="character varying(20)"),
        Column("amount", "numeric", sql_type="numeric(5,2)"),
    ]

    async def batches() -> Any:
        yield [(1, "a", Decimal("1.25"))]

    connector = await PROVIDER.connect({"url": str(tmp_path), "format": "parquet"})
    try:
        await connector.write("t", columns, batches(), WriteMode.OVERWRITE, ["id"])
        (stream,) = await connector.discover()
    finally:
        await connector.close()
    assert stream.primary_key == ("id",)
    assert list(stream.columns) == columns


# -- PostgreSQL → file → PostgreSQL ----------------------------------------------

ROUND_TRIP_DDL = """
CREATE TABLE people (
    id integer PRIMARY KEY,
    name varchar(20) NOT NULL,
    amount numeric(5,2),
    big numeric,
    counts integer[],
    tags text[],
    seen timestamptz,
    born date,
    doc json,
    docb jsonb,
    token uuid,
    raw bytea,
    active boolean
);
INSERT INTO people VALUES
 (1, 'Ada, "the" first', 123.45, 12345678901234567890.123456789, '{1,NULL,3}',
  '{"a b",NULL,"c,d"}', '2024-01-02 03:04:05.000006+05:30', '2024-02-29',
  '{"k": [1, "two", null]}', '{"é": {"x": true}}', '12345678-1234-5678-1234-567812345678',
  '\\x00ff10', true),
 (2, 'नमस्ते 🚀', -999.99, -0.000000001, '{}', '{}', '-infinity', 'infinity', 'null', '[]',
  NULL, '\\x', false),
 (3, 'line
break', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
"""
# What a format cannot keep (docs/data-types.md, "Known limitations") is left
# out of its round trip: Parquet has no infinite dates, CSV no empty bytes.
LIMITS = {
    "parquet": "UPDATE people SET seen = '1999-12-31 23:59:59-08', born = '0001-01-01' "
    "WHERE id = 2",
    "csv": "UPDATE people SET raw = '\\x01' WHERE id = 2",
}

# The table's shape as PostgreSQL declares it: column, type, NOT NULL; and its key.
SHAPE = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull
FROM pg_attribute a WHERE a.attrelid = 'people'::regclass AND a.attnum > 0
  AND NOT a.attisdropped ORDER BY a.attnum
"""
KEY = """
SELECT array_agg(a.attname ORDER BY k.n) FROM pg_index i
CROSS JOIN unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = 'people'::regclass AND i.indisprimary
"""
# json compares as its value (a file carries the value, not its spacing).
VALUES = "SELECT *, doc::jsonb AS doc FROM people ORDER BY id"


class _Quiet:
    async def extracted(self, stream: str, rows: int) -> None:
        return None

    async def loaded(self, stream: str, rows: int) -> None:
        return None


async def _move(source: Any, destination: Any, path: str, blob: Path) -> None:

    streams = transfer.select_streams(await source.discover(), ["people"])
    spec = parse_spec(None)
    identity = LoadIdentity(str(uuid.uuid4()))
    if path == "direct":
        await transfer.direct(
            source, destination, streams, spec, WriteMode.OVERWRITE, _Quiet(), identity=identity
        )
        return
    store = LocalBlobStore(blob)
    manifest = await transfer.stage(source, streams, store, "run/", _Quiet())
    await transfer.load(
        destination, manifest, store, "run/", spec, WriteMode.OVERWRITE, _Quiet(), identity=identity
    )


async def _shape(url: str) -> tuple[list[Any], Any, list[Any]]:

    conn = await asyncpg.connect(url)
    try:
        shape = [tuple(r) for r in await conn.fetch(SHAPE)]
        key = await conn.fetchval(KEY)
        rows = [tuple(r) for r in await conn.fetch(VALUES)]
    finally:
        await conn.close()
    return shape, key, rows


@pytest.mark.parametrize("path", ["direct", "staged"])
@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
async def test_postgres_through_a_file_to_postgres_keeps_types_and_values(
    pg_server_url: str, tmp_path: Path, fmt: str, path: str
) -> None:
    """The round trip of issue 26, with no declared columns: the landed
    table's column types, NOT NULL and primary key are the source's, and
    every value compares equal (12345678901234567890.123456789 included)."""

    postgres, files = get_provider("postgres"), get_provider("file")
    folder = tmp_path / "files"
    folder.mkdir()
    async with (
        scratch_database(pg_server_url, "setu_src") as source_url,
        scratch_database(pg_server_url, "setu_dst") as target_url,
    ):
        conn = await asyncpg.connect(source_url)
        try:
            await conn.execute(ROUND_TRIP_DDL)
            if fmt in LIMITS:
                await conn.execute(LIMITS[fmt])
        finally:
            await conn.close()
        file_config = {"url": str(folder), "format": fmt}
        legs = (
            (postgres, postgres_config(source_url), files, file_config),
            (files, file_config, postgres, postgres_config(target_url)),
        )
        for leg, (from_, from_config, to, to_config) in enumerate(legs):
            source = await from_.connect(from_config)
            destination = await to.connect(to_config)
            try:
                await _move(source, destination, path, tmp_path / f"blob-{leg}")
            finally:
                await source.close()
                await destination.close()
        expected, landed = await _shape(source_url), await _shape(target_url)
    assert landed[0] == expected[0]  # types and NOT NULL
    assert landed[1] == expected[1] == ["id"]
    assert landed[2] == expected[2]
    big = next(row[3] for row in landed[2] if row[0] == 1)
    assert str(big) == "12345678901234567890.123456789"


# -- the sidecar itself ------------------------------------------------------------

TYPED = [
    Column("id", "integer", nullable=False),
    Column("name", "text", nullable=False, sql_type="character varying(20)"),
    Column("amount", "numeric", sql_type="numeric(5,2)"),
    Column("tags", "text", sql_type="text[]"),
    Column("doc", "json", sql_type="json"),
]
TYPED_ROWS = [(1, "a", Decimal("1.25"), '{x,"y z"}', {"k": 1}), (2, "b", None, None, None)]


async def _rows(*batches: list[Any]) -> Any:
    for batch in batches:
        yield batch


async def _write(
    url: str,
    fmt: str,
    columns: list[Column],
    rows: list[Any],
    mode: Any,
    key: list[str],
    **extra: Any,
) -> None:
    connector = await PROVIDER.connect({"url": url, "format": fmt, **extra})
    try:
        await connector.write("t", columns, _rows(rows), mode, key)
    finally:
        await connector.close()


async def _discover(url: str, fmt: str, **extra: Any) -> list[Any]:
    connector = await PROVIDER.connect({"url": url, "format": fmt, **extra})
    try:
        return list(await connector.discover())
    finally:
        await connector.close()


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
async def test_a_text_file_reads_back_as_written(tmp_path: Path, fmt: str) -> None:
    """Discover offers the sidecar's columns (types, NOT NULL, SQL types) and
    key, and read converts the values by them."""

    await _write(str(tmp_path), fmt, TYPED, TYPED_ROWS, WriteMode.OVERWRITE, ["id"])
    side = tmp_path / f"t.{fmt}.setu-schema.json"
    assert json.loads(side.read_text())["primary_key"] == ["id"]
    connector = await PROVIDER.connect({"url": str(tmp_path), "format": fmt})
    try:
        (stream,) = await connector.discover()
        rows = [row async for batch in connector.read(stream, 10) for row in batch]
    finally:
        await connector.close()
    assert list(stream.columns) == TYPED
    assert stream.primary_key == ("id",)
    assert rows == TYPED_ROWS


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
async def test_declared_columns_win_over_the_sidecar(tmp_path: Path, fmt: str) -> None:

    await _write(str(tmp_path), fmt, TYPED, TYPED_ROWS, WriteMode.OVERWRITE, ["id"])
    (stream,) = await _discover(str(tmp_path), fmt, columns={"t": {"amount": "text"}})
    assert stream.columns[2] == Column("amount", "text", nullable=True)
    assert stream.columns[1] == TYPED[1]


async def test_a_sidecar_is_no_stream_and_no_object(tmp_path: Path) -> None:
    """The folder's streams are its data files: a sidecar is none, nor is
    one whose data file was deleted; the stream's object is its data file,
    and a change to it is what counts."""

    await _write(str(tmp_path), "jsonl", TYPED, TYPED_ROWS, WriteMode.OVERWRITE, ["id"])
    await _write(str(tmp_path), "jsonl", TYPED, TYPED_ROWS, WriteMode.OVERWRITE, ["id"])
    (tmp_path / "gone.jsonl.setu-schema.json").write_bytes(
        (tmp_path / "t.jsonl.setu-schema.json").read_bytes()
    )
    for fmt in ("jsonl", "csv", "parquet"):
        names = [s.name for s in await _discover(str(tmp_path), fmt)]
        assert names == (["t"] if fmt == "jsonl" else [])
    connector = await PROVIDER.connect({"url": str(tmp_path), "format": "jsonl"})
    try:
        (stream,) = await connector.discover()
        objects = await connector.objects(stream)  # type: ignore[attr-defined]
        assert list(objects) == ["t.jsonl"]
        (tmp_path / "t.jsonl.setu-schema.json").write_text("{}")
        assert await connector.objects(stream) == objects  # type: ignore[attr-defined]
        with (tmp_path / "t.jsonl").open("a") as data:
            data.write('{"id": 3, "name": "c"}\n')
        assert await connector.objects(stream) != objects  # type: ignore[attr-defined]
    finally:
        await connector.close()


@pytest.mark.parametrize(
    ("document", "says"),
    [
        (b"not json", "not JSON"),
        (b"[]", "not a JSON object"),
        (b'{"setu_schema": 2, "columns": []}', "setu_schema: version 2"),
        (b'{"setu_schema": 1, "columns": "id"}', "columns: not a non-empty list"),
        (b'{"setu_schema": 1, "columns": [{"name": "id", "type": "money"}]}', "unknown type"),
        (
            b'{"setu_schema": 1, "columns": [{"name": "id", "type": "text", "sql_type": "drop '
            b'table x"}]}',
            r"columns\[0\]",
        ),
        (
            b'{"setu_schema": 1, "columns": [{"name": "id", "type": "text", "nullable": "no"}]}',
            r"columns\[0\].nullable",
        ),
        (b'{"setu_schema": 1, "columns": [{"name": "", "type": "text"}]}', "not a column name"),
        (b'{"setu_schema": 1, "columns": [{"name": 7, "type": "text"}]}', "not a column name"),
        (
            b'{"setu_schema": 1, "columns": [{"name": "id", "type": "text"}, '
            b'{"name": "id", "type": "text"}]}',
            "names a column twice",
        ),
        (
            b'{"setu_schema": 1, "columns": [{"name": "id", "type": "text"}], '
            b'"primary_key": ["../../etc/passwd"]}',
            "primary_key",
        ),
        (
            b'{"setu_schema": 1, "columns": [{"name": "id", "type": "text"}], "data_bytes": -1}',
            "data_bytes",
        ),
        (b'{"setu_schema": 1, "columns": [{"name": "id", "type": "text"}], "x": 1}', "'x'"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (
            b'{"setu_schema": 1, "columns": [{"name": "id", "type": "integer", '
            b'"sql_type": "text"}]}',
            "does not hold integer",
        ),
        (
            b'{"setu_schema": 1, "columns": ['
            + b",".join(b'{"name": "c%d", "type": "text"}' % i for i in range(10_001))
            + b"]}",
            "more than 10000 columns",
        ),
    ],
)
async def test_a_malformed_sidecar_is_a_clear_error(
    tmp_path: Path, document: bytes, says: str
) -> None:

    (tmp_path / "t.jsonl").write_text('{"id": "1"}\n')
    (tmp_path / "t.jsonl.setu-schema.json").write_bytes(document)
    with pytest.raises(PermanentError, match=f"t.jsonl.setu-schema.json: .*{says}"):
        await _discover(str(tmp_path), "jsonl")


async def test_a_huge_sidecar_is_refused_unread(tmp_path: Path) -> None:

    (tmp_path / "t.csv").write_text("id\n1\n")
    with (tmp_path / "t.csv.setu-schema.json").open("wb") as huge:
        huge.write(b'{"setu_schema": 1, "columns": [' + b" " * (sidecar.MAX_BYTES + 10))
    with pytest.raises(PermanentError, match=r"t.csv.setu-schema.json: .*larger than"):
        await _discover(str(tmp_path), "csv")


async def test_a_sidecar_linked_out_of_the_workspace_is_refused(tmp_path: Path) -> None:

    root = tmp_path / "ws"
    root.mkdir()
    (root / "t.jsonl").write_text('{"id": 1}\n')
    (tmp_path / "secret.json").write_text('{"setu_schema": 1}')
    (root / "t.jsonl.setu-schema.json").symlink_to(tmp_path / "secret.json")
    connector = await PROVIDER.connect({"url": str(root), "format": "jsonl"}, root=root)
    try:
        with pytest.raises(ConfigError, match="outside the workspace folder"):
            await connector.discover()
    finally:
        await connector.close()


@pytest.mark.parametrize(
    ("fmt", "edit", "says"),
    [
        ("csv", lambda text: text.replace("id,name", "id,nom", 1), "its header"),
        ("jsonl", lambda text: text + '{"id": 3, "name": "c", "extra": 1}\n', "its fields"),
    ],
)
async def test_a_sidecar_that_disagrees_with_its_file_is_a_clear_error(
    tmp_path: Path, fmt: str, edit: Any, says: str
) -> None:
    """Another tool changed the file's columns but kept its size… or the
    sidecar records no size: the mismatch is named, never guessed past."""

    await _write(str(tmp_path), fmt, TYPED[:2], [(1, "a"), (2, "b")], WriteMode.OVERWRITE, [])
    data = tmp_path / f"t.{fmt}"
    data.write_text(edit(data.read_text()))
    side = tmp_path / f"t.{fmt}.setu-schema.json"
    body = json.loads(side.read_text())
    del body["data_bytes"]  # as a person writes one: it describes whatever file is there
    side.write_text(json.dumps(body))
    with pytest.raises(PermanentError, match=f"t.{fmt}: {says} .* does not match .*sidecar"):
        await _discover(str(tmp_path), fmt)


async def test_a_stale_sidecar_is_ignored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A data file whose size is not the one its sidecar recorded (a write
    cut between the two commits) is read by inference, and the log says why."""

    await _write(str(tmp_path), "csv", TYPED[:2], [(1, "a")], WriteMode.OVERWRITE, ["id"])
    with (tmp_path / "t.csv").open("a") as data:
        data.write("2,b\n")
    (stream,) = await _discover(str(tmp_path), "csv")
    assert [c.type for c in stream.columns] == ["smallint", "text"]
    assert stream.primary_key == ()
    assert "t.csv.setu-schema.json: ignored" in caplog.text


async def test_appends_and_upserts_keep_and_extend_the_sidecar(tmp_path: Path) -> None:
    """An append adds its new columns (nullable: the old rows lack them) and
    keeps the key; an upsert keeps it; a copied append that changes a
    column's type to one that does not hold the old values is refused, and
    leaves both files as they were."""

    url = str(tmp_path)
    await _write(url, "jsonl", TYPED[:2], [(1, "a")], WriteMode.OVERWRITE, ["id"])
    wider = [Column("id", "bigint", nullable=False), TYPED[1], Column("n", "smallint", False)]
    await _write(url, "jsonl", wider, [(2, "b", 5)], WriteMode.APPEND, [])
    (stream,) = await _discover(url, "jsonl")
    assert list(stream.columns) == [wider[0], TYPED[1], Column("n", "smallint", nullable=True)]
    assert stream.primary_key == ("id",)
    await _write(url, "jsonl", wider, [(2, "B", 6)], WriteMode.UPSERT, ["id"])
    (stream,) = await _discover(url, "jsonl")
    assert list(stream.columns) == [wider[0], TYPED[1], Column("n", "smallint", nullable=True)]
    data, side = (tmp_path / "t.jsonl").read_bytes(), (tmp_path / "t.jsonl.setu-schema.json")
    before = side.read_bytes()
    texts = [Column("id", "text", nullable=False), TYPED[1]]
    with pytest.raises(PermanentError, match=r"column 'id' holds bigint .* as text"):
        await _write(url, "jsonl", texts, [("x", "c")], WriteMode.APPEND, [])
    assert (tmp_path / "t.jsonl").read_bytes() == data
    assert side.read_bytes() == before


async def test_the_sidecar_travels_to_s3_and_back(s3_endpoint: S3Endpoint) -> None:

    bucket = await s3_endpoint.make_bucket()
    extra = {
        "endpoint_url": s3_endpoint.endpoint_url,
        "access_key_id": "testing",
        "secret_access_key": "testing",
    }
    url = f"s3://{bucket}/data/"
    await _write(url, "csv", TYPED, TYPED_ROWS, WriteMode.OVERWRITE, ["id"], **extra)
    async with s3_client(s3_endpoint.settings) as client:
        listing = await client.list_objects_v2(Bucket=bucket, Prefix="data/")
    assert sorted(o["Key"] for o in listing["Contents"]) == [
        "data/t.csv",
        "data/t.csv.setu-schema.json",
    ]
    connector = await PROVIDER.connect({"url": url, "format": "csv", **extra})
    try:
        (stream,) = await connector.discover()
        rows = [row async for batch in connector.read(stream, 10) for row in batch]
    finally:
        await connector.close()
    assert list(stream.columns) == TYPED
    assert stream.primary_key == ("id",)
    assert rows == TYPED_ROWS


async def test_a_malformed_sidecar_refuses_an_append_and_an_overwrite_replaces_it(
    tmp_path: Path,
) -> None:
    url = str(tmp_path)
    await _write(url, "csv", TYPED[:2], [(1, "a")], WriteMode.OVERWRITE, ["id"])
    side = tmp_path / "t.csv.setu-schema.json"
    side.write_text('{"setu_schema": 1, "columns": [{"name": "id", "type": "money"}]}')
    data = (tmp_path / "t.csv").read_bytes()
    for mode in (WriteMode.APPEND, WriteMode.UPSERT):
        with pytest.raises(PermanentError, match=r"t.csv.setu-schema.json: .*unknown type"):
            await _write(url, "csv", TYPED[:2], [(2, "b")], mode, ["id"])
    assert (tmp_path / "t.csv").read_bytes() == data
    await _write(url, "csv", TYPED[:2], [(3, "c")], WriteMode.MERGE, ["id"])
    (stream,) = await _discover(url, "csv")
    assert list(stream.columns) == TYPED[:2]
    assert stream.primary_key == ("id",)


async def test_a_headerless_csv_takes_its_column_names_from_its_sidecar(tmp_path: Path) -> None:
    """A CSV written without a header reads back with its names and types
    (without a sidecar its columns would be c1, c2, …)."""
    options = {"csv": {"header": False}}
    await _write(str(tmp_path), "csv", TYPED, TYPED_ROWS, WriteMode.OVERWRITE, ["id"], **options)
    assert (tmp_path / "t.csv").read_text().startswith("1,a,1.25,")
    connector = await PROVIDER.connect({"url": str(tmp_path), "format": "csv", **options})
    try:
        (stream,) = await connector.discover()
        rows = [row async for batch in connector.read(stream, 10) for row in batch]
    finally:
        await connector.close()
    assert list(stream.columns) == TYPED
    assert rows == TYPED_ROWS
    (tmp_path / "t.csv.setu-schema.json").unlink()
    (stream,) = await _discover(str(tmp_path), "csv", **options)
    assert [c.name for c in stream.columns] == ["c1", "c2", "c3", "c4", "c5"]
