"""Parquet for the `file` provider, through pyarrow: a stream's columns from
a file's schema, its rows read a row group at a time, and rows written a
row group at a time, so neither side holds a whole file in memory.

Types, both ways (docs/files.md, "Parquet"):

| neutral     | Arrow / Parquet                                   |
| ----------- | ------------------------------------------------- |
| boolean     | bool                                              |
| smallint    | int16 (read: int8, int16, uint8)                  |
| integer     | int32 (read: uint16)                              |
| bigint      | int64 (read: uint32)                              |
| numeric     | decimal128(p,s), decimal256 past 38; bare numeric: decimal128(38,9) |
| real        | float32 (read: float16)                           |
| double      | float64                                           |
| text        | string; a SQL array type (integer[]) as a list    |
| bytes       | binary                                            |
| date        | date32                                            |
| time        | time64[us]                                        |
| timestamp   | timestamp[us]                                     |
| timestamptz | timestamp[us, tz=UTC]                             |
| uuid        | uuid (Parquet's UUID)                             |
| json        | json (Parquet's JSON, a string); structs and maps read as json |

A column's exact SQL type (varchar(20), numeric(5,2)) rides in the field's
metadata (`setu.sql_type`), so Parquet → PostgreSQL declares what the source
declared. Reading: nanosecond timestamps are cut to microseconds; a zone is
converted to UTC.

An S3 file is read by ranged GETs (the footer, then each row group's column
chunks: s3_ranges), never downloaded whole; it is written locally before it
is uploaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from decimal import Decimal, localcontext
from pathlib import Path
from typing import IO, Any, Protocol

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from setu_engine.errors import PermanentError, SqlTypeError, ValueFault
from setu_engine.providers.files import arrays as pgarrays
from setu_engine.providers.files.codec import _dropped, _Source, to_json
from setu_engine.providers.files.failures import file_error
from setu_engine.providers.files.merge import Old, key_bytes
from setu_engine.providers.files.parquet_options import ParquetOptions
from setu_engine.providers.files.s3_ranges import S3RangeFile
from setu_engine.providers.files.storage import (
    _LocalFiles,
    _open_nofollow,
    _S3Files,
    _Storage,
)
from setu_engine.staged.s3 import BotoCoreError, ClientError
from setu_engine.values import sqltypes
from setu_engine.values.special import JSON_NULL, shortest_real
from setu_engine.values.types import Column, Row

SQL_TYPE_KEY = b"setu.sql_type"
# The stream's primary key, a JSON list of column names, in the file's own
# key/value metadata: Parquet has no key of its own.
PRIMARY_KEY_KEY = b"setu.primary_key"
# A bare numeric's decimal: 29 digits before the point, 9 after.
BARE_NUMERIC = (38, 9)
READ_ROWS = 10_000
# An upsert's old rows per batch of the Arrow join (arrow_join.py): each
# batch is a gather from the written rows, whose fixed cost wants many rows.
JOIN_ROWS = 100_000

# ---------------------------------------------------------------- options


class _Configured(Protocol):
    @property
    def parquet(self) -> ParquetOptions: ...


# ---------------------------------------------------------------- types

_SIMPLE: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "smallint": pa.int16(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "real": pa.float32(),
    "double": pa.float64(),
    "text": pa.string(),
    "bytes": pa.binary(),
    "date": pa.date32(),
    "time": pa.time64("us"),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "uuid": pa.uuid(),
    "json": pa.json_(),
}


def _decimal(precision: int, scale: int) -> pa.DataType:
    if precision <= 38:
        return pa.decimal128(precision, scale)
    if precision <= 76:
        return pa.decimal256(precision, scale)
    raise PermanentError(
        f"numeric({precision},{scale}) is wider than Parquet's widest decimal (76 digits); "
        f"cast the column to text in the pipeline's spec"
    )


def arrow_type(column: Column) -> pa.DataType:
    """The Arrow type a column is written as."""
    sql = sqltypes.parse(column.sql_type) if column.sql_type else None
    if sql is not None and sql.array:
        element = Column(column.name, sqltypes.BASES[sql.base], sql_type=sql.render()[:-2])
        return pa.list_(arrow_type(element))
    if column.type == "numeric":
        if sql is not None and sql.args:
            precision, scale = sql.args[0], sql.args[1] if len(sql.args) > 1 else 0
            return _decimal(precision, max(scale, 0))
        return _decimal(*BARE_NUMERIC)
    return _SIMPLE[column.type]


def arrow_schema(columns: Sequence[Column]) -> pa.Schema:
    fields = []
    for column in columns:
        # A bare numeric says so: its decimal's (38,9) is not its own.
        sql_type = column.sql_type or ("numeric" if column.type == "numeric" else "")
        metadata = {SQL_TYPE_KEY: sql_type.encode()} if sql_type else None
        fields.append(pa.field(column.name, arrow_type(column), column.nullable, metadata))
    return pa.schema(fields)


def _extension(type_: pa.DataType) -> str:
    return str(type_.extension_name) if isinstance(type_, pa.BaseExtensionType) else ""


def _neutral(type_: pa.DataType) -> tuple[str, str]:
    """(neutral type, SQL type or "") of an Arrow type."""
    if _extension(type_) == "arrow.uuid":
        return "uuid", ""
    if _extension(type_) == "arrow.json":
        return "json", ""
    if pa.types.is_dictionary(type_):
        return _neutral(type_.value_type)
    if pa.types.is_decimal(type_):
        sql = f"numeric({type_.precision},{type_.scale})"
        return "numeric", sql if type_.precision <= 1000 and type_.scale >= 0 else ""
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        element, sql = _neutral(type_.value_type)
        if element != "json" and not pa.types.is_nested(type_.value_type):
            return "text", (sql or sqltypes.PLAIN[element]) + "[]"
        return "json", ""
    for test, neutral in _READ_TESTS:
        if test(type_):
            return neutral, ""
    if pa.types.is_nested(type_):
        return "json", ""
    return "text", ""  # durations, intervals, nulls: read as their text


_READ_TESTS: tuple[tuple[Callable[[pa.DataType], bool], str], ...] = (
    (pa.types.is_boolean, "boolean"),
    (lambda t: t in (pa.int8(), pa.int16(), pa.uint8()), "smallint"),
    (lambda t: t in (pa.int32(), pa.uint16()), "integer"),
    (lambda t: t in (pa.int64(), pa.uint32()), "bigint"),
    (lambda t: t == pa.uint64(), "numeric"),
    (lambda t: t in (pa.float16(), pa.float32()), "real"),
    (pa.types.is_float64, "double"),
    (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), "text"),
    (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t), "bytes"),
    (pa.types.is_fixed_size_binary, "bytes"),
    (pa.types.is_date, "date"),
    (pa.types.is_time, "time"),
    (lambda t: pa.types.is_timestamp(t) and t.tz is None, "timestamp"),
    (pa.types.is_timestamp, "timestamptz"),
)


def column_of(field: pa.Field, declared: str | None = None) -> Column:
    """A stream's column from a file's field (declared type first)."""
    if declared:
        return Column(field.name, declared, field.nullable)
    neutral, sql = _neutral(field.type)
    kept = (field.metadata or {}).get(SQL_TYPE_KEY, b"").decode()
    if kept:
        try:
            if sqltypes.parse(kept).neutral == neutral:
                sql = sqltypes.canonical(kept)
        except SqlTypeError:
            pass  # another tool's metadata: the Arrow type says enough
    return Column(field.name, neutral, field.nullable, sqltypes.kept(sql, neutral) if sql else "")


# ---------------------------------------------------------------- reading


@contextlib.asynccontextmanager
async def _opened(storage: _Storage, ref: str) -> AsyncIterator[IO[bytes]]:
    """The file, opened for random access: in place when local; on S3, read
    by ranged GETs (s3_ranges), so only the bytes read are fetched."""
    if isinstance(storage, _S3Files):
        async with _s3_opened(storage, ref) as handle:
            yield handle
        return
    assert isinstance(storage, _LocalFiles)
    try:
        real = await asyncio.to_thread(storage._inside, ref)
        local = await asyncio.to_thread(_open_nofollow, real)
    except OSError as exc:
        raise file_error(exc, f"cannot open {storage.where(ref)}") from exc
    with local:
        yield local


@contextlib.asynccontextmanager
async def _s3_opened(storage: _S3Files, ref: str) -> AsyncIterator[IO[bytes]]:
    try:
        client = await storage._open()
        head = await client.head_object(Bucket=storage.bucket, Key=ref)
        loop = asyncio.get_running_loop()
        ranges = S3RangeFile(
            client, storage.bucket, ref, int(head["ContentLength"]), head["ETag"], loop
        )
        with io.BufferedReader(ranges, buffer_size=64 * 1024) as handle:
            yield handle
    except (ClientError, BotoCoreError) as exc:
        raise storage._error(ref, exc) from exc


def _parquet_file(handle: IO[bytes], source: _Source) -> pq.ParquetFile:
    try:
        # Row group by row group: pre-buffering would read every row group at once.
        return pq.ParquetFile(handle, pre_buffer=False)
    except (pa.ArrowException, OSError) as exc:
        raise PermanentError(f"{source.where} is not a Parquet file ({exc})") from exc


async def parquet_columns(
    storage: _Storage, ref: str, source: _Source, declared: dict[str, str]
) -> list[Column]:
    """A file's columns, from its footer."""
    async with _opened(storage, ref) as handle:
        schema = (await asyncio.to_thread(_parquet_file, handle, source)).schema_arrow
    return [
        column_of(field, declared.get(field.name)) for field in _checked(schema, declared, source)
    ]


async def parquet_stream(
    storage: _Storage, ref: str, source: _Source, declared: dict[str, str]
) -> tuple[list[Column], tuple[str, ...]]:
    """A file's columns and primary key (setu.primary_key), from its footer.
    A key that is not a list of the file's column names is ignored: another
    tool may write anything there."""
    async with _opened(storage, ref) as handle:
        schema = (await asyncio.to_thread(_parquet_file, handle, source)).schema_arrow
    columns = [column_of(f, declared.get(f.name)) for f in _checked(schema, declared, source)]
    try:
        key = json.loads((schema.metadata or {}).get(PRIMARY_KEY_KEY, b"[]"))
    except ValueError:
        key = []
    names = {c.name for c in columns}
    valid = isinstance(key, list) and all(isinstance(k, str) and k in names for k in key)
    return columns, tuple(key) if valid and len(set(key)) == len(key) else ()


def _checked(schema: pa.Schema, declared: dict[str, str], source: _Source) -> pa.Schema:
    for name in declared:
        if name not in schema.names:
            where = f"config.columns.{source.stream}.{name}"
            raise PermanentError(f"{where}: {source.where} has no such column")
    return schema


async def parquet_rows(
    storage: _Storage, ref: str, source: _Source, columns: Sequence[Column], rewrite: bool
) -> AsyncGenerator[list[Row], None]:
    """The file's rows as the given columns, a batch at a time. For a
    rewrite (the old rows of a file being written) a column the new rows
    lack is an error, and one the file lacks reads as NULL."""
    async with contextlib.aclosing(_batches(storage, ref, source, columns, rewrite)) as batches:
        async for batch, done in batches:
            yield await asyncio.to_thread(_rows_of, batch, columns, source, done)


async def parquet_keyed(
    storage: _Storage, ref: str, source: _Source, columns: Sequence[Column], positions: list[int]
) -> AsyncGenerator[Old, None]:
    """The file's rows as an upsert's join needs them (merge.py's Old), a
    batch at a time, as a rewrite reads them: each row's key from the key
    columns alone; a batch whose rows are kept (some of them) is decoded
    whole, as parquet_rows decodes it, so a bad value names its row."""
    async with contextlib.aclosing(_batches(storage, ref, source, columns, True)) as batches:
        async for batch, done in batches:
            yield await asyncio.to_thread(_keyed, batch, columns, positions, source, done)


def _keyed(
    batch: pa.RecordBatch,
    columns: Sequence[Column],
    positions: list[int],
    source: _Source,
    before: int,
) -> Old:
    keyed = [columns[i] for i in positions]
    rows = _rows_of(batch, keyed, source, before)
    where = list(range(len(keyed)))
    keys = [key_bytes(row, where) for row in rows]

    def kept(at: list[int]) -> list[Row]:
        whole = _rows_of(batch, columns, source, before)
        return [whole[i] for i in at]

    return Old(keys, kept)


async def key_column(
    storage: _Storage, ref: str, source: _Source, column: Column, type_: pa.DataType
) -> pa.ChunkedArray:
    """The old file's values of one column, every row, as `type_` (a column
    the file lacks is NULL in every row, as a read gives it; another type
    is converted as a read converts it)."""
    async with _opened(storage, ref) as handle:
        file = await asyncio.to_thread(_parquet_file, handle, source)
        if column.name not in file.schema_arrow.names:
            return pa.chunked_array([pa.nulls(file.metadata.num_rows, type_)])
        read = await asyncio.to_thread(file.read, columns=[column.name], use_threads=False)
    values = read.column(0)
    if values.type == type_:
        return values
    rows = await asyncio.to_thread(table_rows, read, [column], source, 0)
    return pa.chunked_array([pa.array([row[0] for row in rows], type_)], type_)


def rewritten_batches(
    storage: _Storage, ref: str, source: _Source, columns: Sequence[Column]
) -> AsyncGenerator[tuple[pa.RecordBatch, int], None]:
    """The old file's record batches for a rewrite (arrow_join.py), each with
    the rows before it: a column the new rows lack is an error, and one the
    file lacks is left out (the batch is converted as a read converts it)."""
    return _batches(storage, ref, source, columns, True, JOIN_ROWS)


async def _batches(
    storage: _Storage,
    ref: str,
    source: _Source,
    columns: Sequence[Column],
    rewrite: bool,
    batch_rows: int | None = None,
) -> AsyncGenerator[tuple[pa.RecordBatch, int], None]:
    """The file's record batches of the given columns, each with the rows before it."""
    async with _opened(storage, ref) as handle:
        file = await asyncio.to_thread(_parquet_file, handle, source)
        names = file.schema_arrow.names
        wanted = {c.name for c in columns}
        if rewrite and (extra := [n for n in names if n not in wanted]):
            raise _dropped(source, extra)
        for column in columns:
            if column.name not in names and not rewrite:
                raise PermanentError(
                    f"{source.where} has no column {column.name!r} (it has {', '.join(names)})"
                )
        present = [c.name for c in columns if c.name in names]
        size = batch_rows or READ_ROWS
        batches = file.iter_batches(batch_size=size, columns=present, use_threads=False)
        done = 0
        while batch := await asyncio.to_thread(next, batches, None):
            yield batch, done
            done += batch.num_rows


def table_rows(
    table: pa.Table, columns: Sequence[Column], source: _Source, before: int
) -> list[Row]:
    """A table of the file's schema as rows, as a read of the file gives them."""
    rows: list[Row] = []
    for batch in table.to_batches():
        rows.extend(_rows_of(batch, columns, source, before + len(rows)))
    return rows


def batch_rows(
    batch: pa.RecordBatch, columns: Sequence[Column], source: _Source, before: int
) -> list[Row]:
    """A record batch of the file as rows, as a read of the file gives them
    (a column the batch lacks reads as NULL)."""
    return _rows_of(batch, columns, source, before)


def _rows_of(
    batch: pa.RecordBatch, columns: Sequence[Column], source: _Source, before: int
) -> list[Row]:
    names = batch.schema.names
    values: list[Sequence[Any]] = []
    for column in columns:
        if column.name in names:
            array = batch.column(names.index(column.name))
            values.append(_read_values(array, column, source, before))
        else:
            values.append([None] * batch.num_rows)
    return list(zip(*values, strict=True))


def _read_values(array: pa.Array, column: Column, source: _Source, before: int) -> list[Any]:
    target = arrow_type(column)
    if array.type != target:
        array = _cast(array, target, column, source, before)
    values: list[Any] = array.to_pylist()
    if column.type == "real":
        return [None if v is None else shortest_real(v) for v in values]
    if column.type == "numeric" and not column.sql_type:
        return [None if v is None else _trimmed(v) for v in values]
    if column.type == "json":
        return [None if v is None else _json(v) for v in values]
    if pa.types.is_list(target):
        return [None if v is None else pgarrays.literal(v) for v in values]
    return values


def _trimmed(value: Decimal) -> Decimal:
    """A bare numeric without the zeros its (38,9) decimal padded it with
    (in a context wide enough for every digit: the default 28 would round)."""
    with localcontext() as context:
        context.prec = _ALL_DIGITS
        if value == value.to_integral_value():
            return value.quantize(_ONE)
        return value.normalize()


_ALL_DIGITS = 100  # decimal256 holds 76


_ONE = Decimal(1)


def _json(text: str) -> Any:
    value = json.loads(text)
    return JSON_NULL if value is None else value


def _cast(
    array: pa.Array, target: pa.DataType, column: Column, source: _Source, before: int
) -> pa.Array:
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if _extension(target) == "arrow.json":
        if pa.types.is_nested(array.type):
            return pa.array(
                [None if v is None else to_json(v) for v in _jsonable(array.to_pylist())],
                type=target,
            )
        return array.cast(pa.string()).cast(target)
    try:
        # Lossy only where documented: nanoseconds cut to microseconds.
        safe = not (pa.types.is_timestamp(array.type) or pa.types.is_time(array.type))
        return array.cast(target, safe=safe)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        row, value = _first_bad(array, target)
        raise ValueFault(
            f"{source.where}: not a valid {column.type} ({exc}); declare "
            f"config.columns.{source.stream}.{column.name} to read it otherwise",
            column=column.name,
            value=value,
            row=None if row is None else before + row + 1,
            stream=source.stream,
        ) from exc


def _first_bad(array: pa.Array, target: pa.DataType) -> tuple[int | None, Any]:
    for index in range(len(array)):
        try:
            array.slice(index, 1).cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return index, array[index].as_py()
    return None, None


def _jsonable(value: Any) -> Any:
    """Nested Arrow values (dicts of lists, maps as pairs) as JSON values."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


# ---------------------------------------------------------------- writing


class ParquetWriter:
    """Writes rows to a Parquet file a row group at a time, in a thread."""

    def __init__(
        self,
        path: Path,
        options: ParquetOptions,
        columns: Sequence[Column],
        primary_key: Sequence[str] = (),
    ) -> None:
        self.columns = list(columns)
        self.schema = arrow_schema(columns)
        if primary_key:
            key = json.dumps(list(primary_key)).encode()
            self.schema = self.schema.with_metadata({PRIMARY_KEY_KEY: key})
        self.options = options
        self.path = path
        self.rows = 0
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0
        compression = None if options.compression == "none" else options.compression
        self.file = pq.ParquetWriter(path, self.schema, compression=compression)

    @classmethod
    async def open(
        cls,
        path: Path,
        config: _Configured,
        columns: Sequence[Column],
        primary_key: Sequence[str] = (),
    ) -> ParquetWriter:
        # A file written by an earlier attempt is replaced, never appended to.
        await asyncio.to_thread(path.unlink, missing_ok=True)
        return await asyncio.to_thread(cls, path, config.parquet, columns, primary_key)

    async def write(self, rows: Sequence[Row]) -> None:
        if rows:
            await asyncio.to_thread(self._write, rows)

    def _write(self, rows: Sequence[Row]) -> None:
        self._append(self.batch_of(rows, self.rows))

    def batch_of(self, rows: Sequence[Row], before: int) -> pa.RecordBatch:
        """Rows as a record batch of the file's schema (a bad value names
        its row, counted from `before`)."""
        arrays = [
            _array(values, column, before)
            for values, column in zip(zip(*rows, strict=True), self.columns, strict=True)
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    async def write_arrow(self, table: pa.Table) -> None:
        """Rows that are a table of the file's schema already."""
        if table.num_rows:
            await asyncio.to_thread(self._append, table)

    def _append(self, data: pa.RecordBatch | pa.Table) -> None:
        self.pending.extend(data.to_batches() if isinstance(data, pa.Table) else [data])
        self.rows += data.num_rows
        self.pending_rows += data.num_rows
        self._flush(self.options.row_group_rows)

    def _flush(self, at_least: int) -> None:
        """Writes full row groups (and at the end, what is left)."""
        if self.pending_rows < at_least or not self.pending_rows:
            return
        table = pa.Table.from_batches(self.pending, schema=self.schema)
        size = self.options.row_group_rows
        while table.num_rows >= at_least and table.num_rows:
            self.file.write_table(table.slice(0, size), row_group_size=size)
            table = table.slice(size)
        self.pending = table.combine_chunks().to_batches() if table.num_rows else []
        self.pending_rows = table.num_rows

    async def close(self) -> None:
        def finish() -> None:
            try:
                self._flush(1)
            finally:
                self.file.close()
            with self.path.open("rb") as handle:
                os.fsync(handle.fileno())

        await asyncio.to_thread(finish)


def _array(values: Sequence[Any], column: Column, before: int) -> pa.Array:
    """One column of a batch as Arrow; a value that does not fit names its row."""
    target = arrow_type(column)
    try:
        prepared = _prepared(values, column, target)
    except ValueFault as fault:
        raise ValueFault(
            fault.reason, column=column.name, value=fault.value, row=before + (fault.row or 0) + 1
        ) from fault
    try:
        array = pa.array(prepared, type=target)
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        row, value = _first_unwritable(prepared, target)
        raise ValueFault(
            f"cannot be written to Parquet as {target} ({exc})",
            column=column.name,
            value=values[row] if row is not None else value,
            row=None if row is None else before + row + 1,
        ) from exc
    if not column.nullable and array.null_count:
        row = next(i for i, v in enumerate(values) if v is None)
        raise ValueFault(
            "NULL in a column declared NOT NULL",
            column=column.name,
            value=None,
            row=before + row + 1,
        )
    return array


def _prepared(values: Sequence[Any], column: Column, target: pa.DataType) -> Sequence[Any]:
    if column.type == "json":
        return [None if v is None else "null" if v is JSON_NULL else to_json(v) for v in values]
    if pa.types.is_list(target):
        element = sqltypes.BASES[sqltypes.parse(column.sql_type).base]
        return [_parsed_array(v, element, column, row) for row, v in enumerate(values)]
    return values


def _parsed_array(text: str | None, element: str, column: Column, row: int) -> list[Any] | None:
    if text is None:
        return None
    try:
        return pgarrays.parse(text, element)
    except (ValueError, ArithmeticError) as exc:
        raise ValueFault(
            f"not a {column.sql_type} Parquet can hold ({exc})",
            column=column.name,
            value=text,
            row=row,  # made absolute by _array
        ) from exc


def _first_unwritable(values: Sequence[Any], target: pa.DataType) -> tuple[int | None, Any]:
    for index, value in enumerate(values):
        try:
            pa.array([value], type=target)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return index, value
    return None, None


class ArrowSpill:
    """An upsert's written rows as Arrow record batches in an IPC file of
    the spill's folder (merge.py's Columnar): each written row converted
    once, as the plain write converts it, and the output batches gathered
    from it by `take` (memory-mapped: the rows stay on disk)."""

    def __init__(self, writer: ParquetWriter, folder: Path) -> None:
        self.writer = writer
        self.path = folder / "written.arrow"
        self._sink = pa.OSFile(str(self.path), "wb")
        self._ipc = pa.ipc.new_file(self._sink, writer.schema)
        self._table: pa.Table | None = None

    def put(self, rows: Sequence[Row], start: int) -> None:
        self._ipc.write_batch(self.writer.batch_of(rows, start))

    def seal(self) -> None:
        self._ipc.close()
        self._sink.close()
        self._table = pa.ipc.open_file(pa.memory_map(str(self.path))).read_all()

    def joined(self, plan: list[int], kept: list[Row]) -> pa.Table:
        assert self._table is not None
        seqs = [seq for seq in plan if seq >= 0]
        taken = self._table.take(pa.array(seqs, pa.int64()))
        if not kept:
            return taken
        both = pa.concat_tables([taken, pa.Table.from_batches([self.writer.batch_of(kept, 0)])])
        order: list[int] = []
        new, old = 0, len(seqs)
        for seq in plan:
            if seq >= 0:
                order.append(new)
                new += 1
            else:
                order.append(old)
                old += 1
        return both.take(pa.array(order, pa.int64()))

    async def write(self, batch: pa.Table) -> None:
        await self.writer.write_arrow(batch)

    def close(self) -> None:
        self._table = None
        if not self._sink.closed:
            self._sink.close()
