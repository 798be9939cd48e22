"""The `file` provider on a local folder and on a real S3 server (moto):
CSV and JSON Lines, discovery, typed reads, the four write modes, atomicity
and config validation."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from setu_engine.errors import ConfigError, PermanentError, ProviderError, TransientError
from setu_engine.kinds import WriteMode
from setu_engine.providers import get_provider
from setu_engine.providers.base import Connector
from setu_engine.providers.files import PROVIDER
from setu_engine.providers.files.storage import _LocalFiles
from setu_engine.staged import s3
from setu_engine.staged.s3 import s3_client
from setu_engine.support.secrets import SecretStore
from setu_engine.values.types import Batch, Column, Stream
from tests.s3server import S3Endpoint


@dataclass
class Place:
    """A folder of files: local, or an S3 prefix reached with a secret reference."""

    url: str
    root: Path | None = None
    s3: S3Endpoint | None = None
    bucket: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def config(self, url: str | None = None, **options: Any) -> dict[str, Any]:
        return {"url": url or self.url, **self.extra, **options}

    async def connect(self, url: str | None = None, **options: Any) -> Connector:
        config = self.config(url, **options)
        PROVIDER.validate_config(config)
        resolved = SecretStore({"S3_SECRET": "testing"}).resolve(config)
        return await PROVIDER.connect(resolved)

    async def put(self, name: str, data: bytes) -> None:
        if self.s3 is None:
            assert self.root is not None
            self.root.mkdir(parents=True, exist_ok=True)
            (self.root / name).write_bytes(data)
            return
        async with s3_client(self.s3.settings) as client:
            await client.put_object(Bucket=self.bucket, Key=f"data/{name}", Body=data)

    async def get(self, name: str) -> bytes:
        if self.s3 is None:
            assert self.root is not None
            return (self.root / name).read_bytes()
        async with s3_client(self.s3.settings) as client:
            response = await client.get_object(Bucket=self.bucket, Key=f"data/{name}")
            async with response["Body"] as body:
                data: bytes = await body.read()
                return data

    def file_url(self, name: str) -> str:
        return f"{self.url.rstrip('/')}/{name}"


@pytest.fixture(params=["local", "s3"])
async def place(request: pytest.FixtureRequest, tmp_path: Path) -> Place:
    if request.param == "local":
        return Place(url=str(tmp_path / "data"), root=tmp_path / "data")
    endpoint: S3Endpoint = request.getfixturevalue("s3_endpoint")
    bucket = await endpoint.make_bucket()
    extra = {
        "endpoint_url": endpoint.endpoint_url,
        "region": endpoint.region,
        "access_key_id": endpoint.access_key_id,
        "secret_access_key": {"$secret": "S3_SECRET"},
    }
    return Place(url=f"s3://{bucket}/data/", s3=endpoint, bucket=bucket, extra=extra)


async def batches_of(*batches: Batch) -> AsyncIterator[Batch]:
    for batch in batches:
        yield batch


async def read_all(connector: Connector, stream: Stream, batch_rows: int = 1000) -> list[Batch]:
    return [batch async for batch in connector.read(stream, batch_rows)]


def columns(spec: str) -> list[Column]:
    return [Column(name, type_) for name, type_ in (p.split(":") for p in spec.split())]


USERS_CSV = (
    b"id,name,score,active,note\n"
    b"1,Ada,12.50,true,\n"
    b'2,"Lovelace, A.",-3,false,"two\nlines"\n'
    b"3,,1e3,TRUE,plain\n"
)


def test_the_registry_finds_the_file_provider() -> None:
    assert get_provider("file") is PROVIDER
    assert PROVIDER.name == "file"


async def test_discover_infers_csv_types_and_lists_only_files_of_the_format(place: Place) -> None:
    await place.put("users.csv", USERS_CSV)
    await place.put("events.jsonl", b'{"a": 1}\n')
    await place.put("empty.csv", b"only,header\n")
    connector = await place.connect(format="csv")
    try:
        streams = {s.name: s for s in await connector.discover()}
    finally:
        await connector.close()

    assert sorted(streams) == ["empty", "users"]
    users = streams["users"]
    assert users.namespace == ""
    assert users.primary_key == ()
    assert users.row_estimate == 0
    assert list(users.columns) == columns(
        "id:smallint name:text score:numeric active:boolean note:text"
    )
    assert list(streams["empty"].columns) == columns("only:text header:text")


async def test_discover_infers_jsonl_types_in_first_seen_order(place: Place) -> None:
    await place.put(
        "events.jsonl",
        b'{"id": 1, "ratio": 1, "ok": true, "who": "a", "meta": {"k": [1]}, "mixed": 1}\n'
        b"\n"
        b'{"id": 2, "ratio": 0.5, "ok": false, "who": null, "meta": [], "mixed": "x", '
        b'"late": null, "huge": 99999999999999999999}\n',
    )
    connector = await place.connect(format="jsonl")
    try:
        (stream,) = await connector.discover()
    finally:
        await connector.close()
    assert stream.name == "events"
    assert list(stream.columns) == columns(
        "id:bigint ratio:double ok:boolean who:text meta:json mixed:text late:text huge:numeric"
    )


async def test_declared_types_override_inference(place: Place) -> None:
    await place.put("users.csv", USERS_CSV)
    connector = await place.connect(
        format="csv", columns={"users": {"id": "int4", "score": "float", "note": "string"}}
    )
    try:
        (stream,) = await connector.discover()
        (rows,) = await read_all(connector, stream)
    finally:
        await connector.close()
    assert list(stream.columns) == columns(
        "id:integer name:text score:double active:boolean note:text"
    )
    assert rows[0] == (1, "Ada", 12.5, True, None)


async def test_csv_reads_in_batches_with_exact_values(place: Place) -> None:
    await place.put("users.csv", USERS_CSV)
    connector = await place.connect(format="csv")
    try:
        (stream,) = await connector.discover()
        batches = await read_all(connector, stream, batch_rows=2)
    finally:
        await connector.close()
    assert batches == [
        [
            (1, "Ada", Decimal("12.50"), True, None),
            (2, "Lovelace, A.", Decimal("-3"), False, "two\nlines"),
        ],
        [(3, None, Decimal("1e3"), True, "plain")],
    ]
    assert str(batches[0][0][2]) == "12.50"


async def test_csv_without_header_and_with_another_delimiter(place: Place) -> None:
    await place.put("t.csv", b"1;x\n2;\n")
    connector = await place.connect(format="csv", csv={"delimiter": ";", "header": False})
    try:
        (stream,) = await connector.discover()
        (rows,) = await read_all(connector, stream)
    finally:
        await connector.close()
    assert list(stream.columns) == columns("c1:smallint c2:text")
    assert rows == [(1, "x"), (2, None)]


async def test_jsonl_reads_exact_values_and_missing_keys_as_null(place: Place) -> None:
    await place.put(
        "events.jsonl",
        b'{"id": 1, "amount": 0.1000000000000000055511151231257827, "at": '
        b'"2030-01-02T03:04:05+02:00", "meta": {"k": 1.5}}\n'
        b'{"id": 2, "amount": "7.25"}\n',
    )
    declared = {"events": {"amount": "numeric", "at": "timestamptz"}}
    connector = await place.connect(format="jsonl", columns=declared)
    try:
        (stream,) = await connector.discover()
        (rows,) = await read_all(connector, stream)
    finally:
        await connector.close()
    assert list(stream.columns) == columns("id:bigint amount:numeric at:timestamptz meta:json")
    at = datetime.fromisoformat("2030-01-02T03:04:05+02:00")
    assert rows == [
        (1, Decimal("0.1000000000000000055511151231257827"), at, {"k": 1.5}),
        (2, Decimal("7.25"), None, None),
    ]


async def test_preview_returns_at_most_limit_rows(place: Place) -> None:
    await place.put("users.csv", USERS_CSV)
    connector = await place.connect(format="csv")
    try:
        (stream,) = await connector.discover()
        assert [row[0] for row in await connector.preview(stream, 2)] == [1, 2]
        assert len(await connector.preview(stream, 10)) == 3
    finally:
        await connector.close()


async def test_a_single_file_url_is_one_stream(place: Place) -> None:
    await place.put("users.csv", USERS_CSV)
    await place.put("other.csv", b"a\n1\n")
    connector = await place.connect(url=place.file_url("users.csv"))
    try:
        (stream,) = await connector.discover()
        assert stream.name == "users"
        assert len((await read_all(connector, stream))[0]) == 3
    finally:
        await connector.close()


async def test_a_value_that_does_not_fit_the_inferred_type_names_file_line_and_column(
    place: Place,
) -> None:
    lines = [b"id,name"] + [b"%d,n" % i for i in range(1000)] + [b"abc,late"]
    await place.put("users.csv", b"\n".join(lines) + b"\n")
    connector = await place.connect(format="csv", csv={"infer_rows": 1000})
    try:
        (stream,) = await connector.discover()
        assert stream.columns[0] == Column("id", "bigint")
        with pytest.raises(ProviderError) as caught:
            await read_all(connector, stream)
    finally:
        await connector.close()
    message = str(caught.value)
    assert "column 'id'" in message
    assert "users.csv: line 1002: not a valid bigint" in message
    assert "(value 'abc')" in message
    assert "config.columns.users.id" in message
    assert caught.value.retryable is False


async def test_a_bad_jsonl_value_names_its_line(place: Place) -> None:
    await place.put("e.jsonl", b'{"n": 1}\n{"n": true}\n')
    connector = await place.connect(format="jsonl")
    try:
        stream = Stream("e", tuple(columns("n:bigint")))
        bad = r"column 'n': .*e\.jsonl: line 2: .*\(value True\)"
        with pytest.raises(ProviderError, match=bad):
            await read_all(connector, stream)
    finally:
        await connector.close()


TYPED = columns(
    "id:bigint name:text amount:numeric ratio:double ok:boolean day:date at:time "
    "ts:timestamp tz:timestamptz u:uuid raw:bytes doc:json"
)
TYPED_ROW = (
    1,
    'say "hi", ok',
    Decimal("12345678901234567890.000000001"),
    0.25,
    True,
    date(2030, 1, 2),
    time(3, 4, 5, 600000),
    datetime(2030, 1, 2, 3, 4, 5),
    datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC),
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    b"\x00\xff",
    {"k": [1, "two", None]},
)
NULL_ROW = (2, *([None] * (len(TYPED) - 1)))


async def test_write_serialises_every_type_to_jsonl_and_reads_it_back(place: Place) -> None:
    connector = await place.connect(format="jsonl", columns={"t": {"amount": "numeric"}})
    try:
        written = await connector.write(
            "t", TYPED, batches_of([TYPED_ROW], [NULL_ROW]), WriteMode.OVERWRITE, []
        )
        stream = Stream("t", tuple(TYPED))
        (rows,) = await read_all(connector, stream)
    finally:
        await connector.close()
    assert written == 2
    assert (await place.get("t.jsonl")).decode().splitlines() == [
        '{"id":1,"name":"say \\"hi\\", ok","amount":12345678901234567890.000000001,'
        '"ratio":0.25,"ok":true,"day":"2030-01-02","at":"03:04:05.600000",'
        '"ts":"2030-01-02T03:04:05","tz":"2030-01-02T03:04:05+00:00",'
        '"u":"12345678-1234-5678-1234-567812345678","raw":"AP8=","doc":{"k":[1,"two",null]}}',
        '{"id":2,"name":null,"amount":null,"ratio":null,"ok":null,"day":null,"at":null,'
        # A json column's SQL NULL leaves its key out: `null` is JSON's null.
        '"ts":null,"tz":null,"u":null,"raw":null}',
    ]
    assert rows == [TYPED_ROW, NULL_ROW]


async def test_write_serialises_every_type_to_csv_and_reads_it_back(place: Place) -> None:
    connector = await place.connect(format="csv")
    try:
        await connector.write(
            "t", TYPED, batches_of([TYPED_ROW, NULL_ROW]), WriteMode.OVERWRITE, []
        )
        (rows,) = await read_all(connector, Stream("t", tuple(TYPED)))
    finally:
        await connector.close()
    assert (await place.get("t.csv")).decode().splitlines() == [
        "id,name,amount,ratio,ok,day,at,ts,tz,u,raw,doc",
        '1,"say ""hi"", ok",12345678901234567890.000000001,0.25,true,2030-01-02,'
        "03:04:05.600000,2030-01-02T03:04:05,2030-01-02T03:04:05+00:00,"
        '12345678-1234-5678-1234-567812345678,AP8=,"{""k"":[1,""two"",null]}"',
        "2,,,,,,,,,,,",
    ]
    assert rows == [TYPED_ROW, NULL_ROW]


ROWS = columns("id:bigint name:text")
OLD = [(1, "a"), (2, "b"), (3, "c")]
NEW = [(3, "C"), (4, "D"), (1, "A")]
EXPECTED = {
    WriteMode.APPEND: [*OLD, *NEW],
    WriteMode.OVERWRITE: NEW,
    WriteMode.UPSERT: [(1, "A"), (2, "b"), (3, "C"), (4, "D")],
    WriteMode.MERGE: [(1, "A"), (3, "C"), (4, "D")],
}


def render(fmt: str, rows: list[tuple[int, str]]) -> list[str]:
    if fmt == "csv":
        return ["id,name", *(f"{i},{n}" for i, n in rows)]
    return [f'{{"id":{i},"name":"{n}"}}' for i, n in rows]


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize("mode", list(WriteMode))
async def test_write_modes_give_the_expected_file(place: Place, fmt: str, mode: WriteMode) -> None:
    connector = await place.connect(format=fmt)
    try:
        await connector.write("users", ROWS, batches_of(OLD), WriteMode.OVERWRITE, [])
        written = await connector.write("users", ROWS, batches_of(NEW[:2], NEW[2:]), mode, ["id"])
    finally:
        await connector.close()
    assert written == 3
    assert (await place.get(f"users.{fmt}")).decode().splitlines() == render(fmt, EXPECTED[mode])


@pytest.mark.parametrize("mode", [WriteMode.APPEND, WriteMode.UPSERT, WriteMode.MERGE])
async def test_writing_to_a_missing_file_creates_it(place: Place, mode: WriteMode) -> None:
    connector = await place.connect(format="csv")
    try:
        assert await connector.write("users", ROWS, batches_of(NEW), mode, ["id"]) == 3
    finally:
        await connector.close()
    assert (await place.get("users.csv")).decode().splitlines() == render("csv", NEW)


async def test_append_maps_old_csv_rows_by_column_name(place: Place) -> None:
    await place.put("users.csv", b"name,id\nx,1\n")
    connector = await place.connect(format="csv")
    try:
        await connector.write(
            "users",
            [*ROWS, Column("age", "bigint")],
            batches_of([(2, "y", 30)]),
            WriteMode.APPEND,
            [],
        )
    finally:
        await connector.close()
    assert (await place.get("users.csv")).decode().splitlines() == [
        "id,name,age",
        "1,x,",
        "2,y,30",
    ]


async def test_append_copies_a_jsonl_file_lacking_a_final_newline(place: Place) -> None:
    await place.put("users.jsonl", b'{"id": 1, "extra": [1.50]}')
    connector = await place.connect(format="jsonl")
    try:
        await connector.write("users", ROWS, batches_of([(2, "b")]), WriteMode.APPEND, [])
    finally:
        await connector.close()
    assert (await place.get("users.jsonl")).decode().splitlines() == [
        '{"id": 1, "extra": [1.50]}',
        '{"id":2,"name":"b"}',
    ]


async def test_upsert_refuses_to_drop_columns_of_the_old_file(place: Place) -> None:
    old = b"id,name,email\n1,a,a@x\n"
    await place.put("users.csv", old)
    connector = await place.connect(format="csv")
    try:
        with pytest.raises(ProviderError, match=r"'email'.*mode overwrite"):
            await connector.write("users", ROWS, batches_of(NEW), WriteMode.UPSERT, ["id"])
    finally:
        await connector.close()
    assert await place.get("users.csv") == old


async def test_a_failing_write_leaves_the_old_file(place: Place) -> None:
    connector = await place.connect(format="jsonl")

    async def failing() -> AsyncIterator[Batch]:
        yield NEW
        raise RuntimeError("source broke")

    try:
        await connector.write("users", ROWS, batches_of(OLD), WriteMode.OVERWRITE, [])
        before = await place.get("users.jsonl")
        schema = await place.get("users.jsonl.setu-schema.json")
        # Written with another key and another type: the sidecar would change.
        changed = [Column("id", "integer", nullable=False), Column("name", "text")]
        for mode in WriteMode:
            with pytest.raises(RuntimeError, match="source broke"):
                await connector.write("users", changed, failing(), mode, ["name"])
    finally:
        await connector.close()
    # Both files as they were: the data and its schema sidecar.
    assert await place.get("users.jsonl") == before
    assert await place.get("users.jsonl.setu-schema.json") == schema
    if place.root is not None:
        assert sorted(os.listdir(place.root)) == ["users.jsonl", "users.jsonl.setu-schema.json"]


async def test_upsert_without_a_key_is_refused(place: Place) -> None:
    connector = await place.connect(format="csv")
    try:
        with pytest.raises(ProviderError, match="write mode upsert needs a key"):
            await connector.write("users", ROWS, batches_of(NEW), WriteMode.UPSERT, [])
        with pytest.raises(ProviderError, match=r"key columns \['nope'\]"):
            await connector.write("users", ROWS, batches_of(NEW), WriteMode.MERGE, ["nope"])
    finally:
        await connector.close()


async def test_a_large_s3_file_is_uploaded_in_parts(
    s3_endpoint: S3Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3, "MULTIPART_THRESHOLD", 1024 * 1024)
    monkeypatch.setattr(s3, "PART_SIZE", 5 * 1024 * 1024)
    bucket = await s3_endpoint.make_bucket()
    place = Place(url=f"s3://{bucket}/data/", s3=s3_endpoint, bucket=bucket)
    place.extra = {
        "endpoint_url": s3_endpoint.endpoint_url,
        "access_key_id": "testing",
        "secret_access_key": {"$secret": "S3_SECRET"},
    }
    rows = [(i, "x" * 100) for i in range(60_000)]
    connector = await place.connect(format="csv")
    try:
        await connector.write("big", ROWS, batches_of(rows), WriteMode.OVERWRITE, [])
        read = await read_all(connector, Stream("big", tuple(ROWS)), batch_rows=100_000)
    finally:
        await connector.close()
    assert len(await place.get("big.csv")) > 6 * 1024 * 1024
    assert read == [rows]
    async with s3_client(s3_endpoint.settings) as client:
        head = await client.head_object(Bucket=bucket, Key="data/big.csv")
    assert head["ETag"].strip('"').endswith("-2")  # a multipart object's ETag counts its parts


async def test_a_single_file_url_writes_that_file(place: Place) -> None:
    connector = await place.connect(url=place.file_url("out.jsonl"))
    try:
        await connector.write("anything", ROWS, batches_of(OLD), WriteMode.OVERWRITE, [])
    finally:
        await connector.close()
    assert (await place.get("out.jsonl")).decode().splitlines() == render("jsonl", OLD)


async def test_test_reports_what_it_reached(place: Place) -> None:
    await place.put("a.csv", b"x\n1\n")
    await place.put("b.csv", b"x\n1\n")
    await place.put("c.jsonl", b"{}\n")
    connector = await place.connect(format="csv")
    try:
        assert await connector.test() == f"2 csv files {'in' if place.root else 'at'} " + (
            str(place.root) if place.root else place.url
        )
    finally:
        await connector.close()


async def test_test_fails_on_a_missing_folder(tmp_path: Path) -> None:
    connector = await PROVIDER.connect({"url": str(tmp_path / "nope"), "format": "csv"})
    with pytest.raises(ProviderError, match=r"folder .*nope does not exist"):
        await connector.test()


async def test_test_fails_on_a_missing_bucket(s3_endpoint: S3Endpoint) -> None:
    config = {
        "url": "s3://setu-missing-bucket/x/",
        "format": "csv",
        "endpoint_url": s3_endpoint.endpoint_url,
        "access_key_id": "testing",
        "secret_access_key": "testing",
    }
    connector = await PROVIDER.connect(config)
    try:
        with pytest.raises(ProviderError, match="bucket setu-missing-bucket does not exist at"):
            await connector.test()
    finally:
        await connector.close()


async def test_a_missing_secret_fails_before_connect(s3_endpoint: S3Endpoint) -> None:
    config = {
        "url": "s3://bkt/x.csv",
        "endpoint_url": s3_endpoint.endpoint_url,
        "access_key_id": "testing",
        "secret_access_key": {"$secret": "NOT_THERE"},
    }
    PROVIDER.validate_config(config)
    with pytest.raises(ConfigError, match="secret 'NOT_THERE' is not in this runtime"):
        SecretStore({}, environ={}).resolve(config)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, "config.url is required"),
        ({"url": "/data", "format": "csv", "bogus": 1}, "config.bogus is not"),
        ({"url": "/data"}, "config.format is required"),
        ({"url": "/data/x.csv", "format": "xml"}, "config.format must be csv, jsonl or parquet"),
        ({"url": "/d/x.csv", "csv": {"delimiter": ";;"}}, "config.csv.delimiter"),
        ({"url": "/d/x.csv", "csv": {"header": "yes"}}, "config.csv.header"),
        ({"url": "/d/x.csv", "csv": {"quote": ","}}, "config.csv.quote"),
        ({"url": "/d/x.csv", "columns": {"x": {"a": "money"}}}, "config.columns.x.a: unknown"),
        ({"url": "/d/x.csv", "columns": {"x": ["a"]}}, "config.columns.x must be"),
        ({"url": "s3:///x.csv"}, "config.url: .*no valid bucket"),
        ({"url": "/d/x.csv", "region": "eu"}, "config.region applies only to an s3://"),
        (
            {"url": "s3://bkt/x.csv", "access_key_id": "AKIA", "secret_access_key": "plain"},
            "config.secret_access_key must be a secret reference .* plain credentials are "
            "never stored",
        ),
        (
            {"url": "s3://bkt/x.csv", "secret_access_key": {"$secret": "S"}},
            "go together",
        ),
        (
            {"url": "s3://bkt/x.csv", "access_key_id": "A", "secret_access_key": {"$secret": "1"}},
            "config.secret_access_key: a secret reference",
        ),
    ],
)
def test_config_errors_name_the_field(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PROVIDER.validate_config(config)


def test_a_valid_s3_config_with_secret_references_passes() -> None:
    PROVIDER.validate_config(
        {
            "url": "s3://bucket/prefix/",
            "format": "jsonl",
            "endpoint_url": "http://127.0.0.1:9000",
            "region": "eu-west-1",
            "access_key_id": {"$secret": "KEY_ID"},
            "secret_access_key": {"$secret": "KEY"},
            "csv": {"delimiter": "\t", "header": False},
            "columns": {"events": {"id": "bigint"}},
        }
    )


# -- a folder confined to a root (the cloud's workspace folder) -------------------


@dataclass
class Confined:
    root: Path  # the workspace folder
    folder: Path  # the connection's folder inside it
    outside: Path  # a file beyond the root

    async def connect(self, **options: Any) -> Connector:
        config = {"url": str(self.folder), "format": "csv", **options}
        return await PROVIDER.connect(config, root=self.root)


@pytest.fixture
def confined(tmp_path: Path) -> Confined:
    root = tmp_path / "workspace"
    (root / "data").mkdir(parents=True)
    outside = tmp_path / "outside.csv"
    outside.write_text("id,name\n1,secret\n")
    return Confined(root.resolve(), (root / "data").resolve(), outside)


async def test_a_confined_folder_lists_no_link_that_leads_outside_its_root(
    confined: Confined,
) -> None:
    (confined.folder / "users.csv").write_text("id,name\n1,Ada\n")
    (confined.folder / "theirs.csv").symlink_to(confined.outside)
    connector = await confined.connect()
    try:
        with pytest.raises(ConfigError, match=r"theirs\.csv leads outside the workspace folder"):
            await connector.discover()
    finally:
        await connector.close()


async def test_a_confined_folder_follows_a_link_that_stays_inside_its_root(
    confined: Confined,
) -> None:
    (confined.root / "users.csv").write_text("id,name\n1,Ada\n")
    (confined.folder / "users.csv").symlink_to(confined.root / "users.csv")
    connector = await confined.connect()
    try:
        [stream] = await connector.discover()
        assert await read_all(connector, stream) == [[(1, "Ada")]]
    finally:
        await connector.close()


@pytest.mark.parametrize("mode", [WriteMode.APPEND, WriteMode.UPSERT, WriteMode.OVERWRITE])
async def test_a_confined_write_neither_reads_nor_replaces_a_file_outside_its_root(
    confined: Confined, mode: WriteMode
) -> None:
    (confined.folder / "users.csv").symlink_to(confined.outside)
    connector = await confined.connect()
    try:
        with pytest.raises(ConfigError, match=r"users\.csv leads outside the workspace folder"):
            await connector.write("users", ROWS, batches_of(NEW), mode, ["id"])
    finally:
        await connector.close()
    assert confined.outside.read_text() == "id,name\n1,secret\n"
    assert (confined.folder / "users.csv").is_symlink()


async def test_a_link_swapped_in_after_the_check_is_not_followed(confined: Confined) -> None:
    checked = confined.folder / "users.csv"
    checked.write_text("id,name\n1,Ada\n")

    class Raced(_LocalFiles):
        """The path passes the check, then becomes a link before it is opened."""

        def _inside(self, ref: str | Path) -> Path:
            real = super()._inside(ref)
            real.unlink()
            real.symlink_to(confined.outside)
            return real

    storage = Raced(confined.folder, single=False, root=confined.root)
    with pytest.raises(ProviderError, match=r"cannot open .*users\.csv"):
        async for _ in storage.chunks(str(checked)):
            pass


@pytest.mark.parametrize("stream", ["../escape", "a/../../escape", "..", "a\\b", "nul\x00"])
async def test_a_stream_name_is_one_file_name_inside_the_folder(
    tmp_path: Path, stream: str
) -> None:
    folder = tmp_path / "deep" / "data"
    connector = await PROVIDER.connect({"url": str(folder), "format": "csv"})
    try:
        with pytest.raises(ConfigError, match="cannot name a file"):
            await connector.write(stream, ROWS, batches_of(NEW), WriteMode.APPEND, [])
    finally:
        await connector.close()
    assert not (tmp_path / "deep" / "escape.csv").exists()
    assert not (tmp_path / "escape.csv").exists()


# -- task failures: permanent or transient (docs/errors.md) -------------------


async def test_a_missing_local_folder_or_file_is_permanent(tmp_path: Path) -> None:
    connector = await PROVIDER.connect({"url": str(tmp_path / "nope"), "format": "csv"})
    try:
        with pytest.raises(PermanentError, match=r"check config\.url"):
            await connector.test()
        with pytest.raises(PermanentError, match="No such file or directory") as info:
            await connector.discover()
    finally:
        await connector.close()
    assert not info.value.retryable


def s3_config(endpoint_url: str, url: str, **extra: Any) -> dict[str, Any]:
    return {
        "url": url,
        "format": "csv",
        "endpoint_url": endpoint_url,
        "access_key_id": "testing",
        "secret_access_key": "testing",
        **extra,
    }


async def test_a_missing_bucket_is_permanent(s3_endpoint: S3Endpoint) -> None:
    config = s3_config(s3_endpoint.endpoint_url, "s3://setu-missing-bucket/x/")
    connector = await PROVIDER.connect(config)
    try:
        with pytest.raises(PermanentError, match=r"check config\.url") as info:
            await connector.discover()
        with pytest.raises(PermanentError, match="bucket setu-missing-bucket does not exist"):
            await connector.test()
    finally:
        await connector.close()
    assert not info.value.retryable


async def test_an_unreachable_s3_endpoint_is_transient() -> None:
    with socket.socket() as bound:  # bound, never listening: connections are refused
        bound.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{bound.getsockname()[1]}"
        connector = await PROVIDER.connect(s3_config(endpoint, "s3://bucket/x/"))
        try:
            with pytest.raises(TransientError) as info:
                await connector.discover()
        finally:
            await connector.close()
    assert info.value.retryable
