"""The `file` provider: CSV, JSON Lines and Parquet files in a local folder
or under an S3 prefix, one stream per file (named by the file's stem).

Reading streams line by line (a thread for local files, the response body
for S3), so no file is ever whole in memory; Parquet a row group at a time
(parquet.py). Types not declared in `config.columns` come from the CSV or
JSON Lines file's schema sidecar when it has one (sidecar.py: written with
every file Setu writes), else are inferred: a CSV column's from every value
(csv.py), a JSON Lines field's from the first rows; a Parquet column's from
the file's schema.

CSV cannot tell NULL from the empty string: an empty field reads as NULL
(in a text column, unless `csv.null_values` says otherwise), and NULL and ''
both write as an empty field.

Writing builds the new file beside the old one (local) or on local disk
(S3) and swaps it in at the end, so a failure leaves the old file as it was.
Upsert and merge join the written rows with the existing file by key
(merge.py): the written keys in memory, their values on disk; only the
keys of the old rows are decoded where they are replaced (keyed.py).
Rows are encoded a batch at a time (encode.py: orjson for JSON Lines),
with the spellings of docs/data-types.md.

Value conversion and JSON Lines parsing live in codec.py, CSV reading in
csv.py, Parquet in parquet.py (PostgreSQL's array text in arrays.py); the
local and S3 storage in storage.py, ranged S3 reads in s3_ranges.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Any

from setu_engine.capabilities import Capabilities, Values
from setu_engine.errors import ConfigError, ProviderError, TypeNameError, ValueFault
from setu_engine.kinds import CopyBatch, WriteMode
from setu_engine.planning.destination_plan import SchemaChanges
from setu_engine.providers.base import Connector
from setu_engine.providers.files import csv as files_csv
from setu_engine.providers.files import merge as files_merge
from setu_engine.providers.files import sidecar
from setu_engine.providers.files.codec import (
    _head,
    _jsonl_rows,
    _nothing,
    _Source,
    infer_json,
    jsonl_records,
)
from setu_engine.providers.files.encode import (
    csv_encoder,
    csv_header,
    jsonl_encoder,
    line_encoder,
)
from setu_engine.providers.files.failures import file_error
from setu_engine.providers.files.keyed import jsonl_keyed, line_keys
from setu_engine.providers.files.parquet_options import (
    ParquetOptions,
    require_pyarrow,
)
from setu_engine.providers.files.parquet_options import (
    parse_options as parse_parquet_options,
)
from setu_engine.providers.files.storage import _LocalFiles, _S3Files, _Storage
from setu_engine.staged import s3
from setu_engine.staged.markers import MARKERS, LoadMarker
from setu_engine.support.egress import Egress
from setu_engine.support.secrets import check_reference, is_reference
from setu_engine.values.types import Batch, Column, Row, Stream, neutral

if TYPE_CHECKING:
    # Imported where a Parquet file is read or written: pyarrow is the parquet extra.
    from setu_engine.providers.files import parquet as files_parquet

FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".parquet": "parquet"}
_S3_KEYS = ("endpoint_url", "region", "access_key_id", "secret_access_key")
_KEYS = ("url", "format", "csv", "parquet", "columns", *_S3_KEYS)

# ---------------------------------------------------------------- config


@dataclass(frozen=True)
class FileConfig:
    url: str
    format: str
    delimiter: str = ","
    header: bool = True
    columns: dict[str, dict[str, str]] | None = None
    s3: s3.S3Settings | None = None
    csv: files_csv.CsvOptions = field(default_factory=files_csv.CsvOptions)
    parquet: ParquetOptions = field(default_factory=ParquetOptions)

    def declared(self, stream: str) -> dict[str, str]:
        return (self.columns or {}).get(stream, {})


def parse_config(config: Any, resolved: bool) -> FileConfig:
    """The config's meaning; raises ConfigError naming the field at fault."""
    if not isinstance(config, dict):
        raise ConfigError("config must be an object")
    unknown = sorted(set(config) - set(_KEYS))
    if unknown:
        raise ConfigError(f"config.{unknown[0]} is not a file provider field; use {_KEYS}")
    url = config.get("url")
    if not isinstance(url, str) or not url.strip():
        raise ConfigError("config.url is required: a local folder or file, or s3://bucket/prefix/")
    if url.startswith("s3://"):
        try:
            s3.parse_s3_url(url)
        except ValueError as exc:
            raise ConfigError(f"config.url: {exc}") from exc
    fmt = config.get("format", FORMATS.get(PurePosixPath(url).suffix.lower()))
    if fmt is None:
        raise ConfigError(
            "config.format is required when config.url is a folder: csv, jsonl or parquet"
        )
    if fmt not in ("csv", "jsonl", "parquet"):
        raise ConfigError(f"config.format must be csv, jsonl or parquet, not {fmt!r}")
    csv_options = files_csv.parse_options(config.get("csv", {}))
    return FileConfig(
        url=url,
        format=fmt,
        delimiter=csv_options.delimiter,
        header=csv_options.header,
        columns=_parse_columns(config.get("columns", {})),
        s3=_parse_s3(config, url.startswith("s3://"), resolved),
        csv=csv_options,
        parquet=parse_parquet_options(config.get("parquet", {})),
    )


def _parse_columns(declared: Any) -> dict[str, dict[str, str]]:
    if not isinstance(declared, dict):
        raise ConfigError("config.columns must be an object: {stream: {column: type}}")
    parsed: dict[str, dict[str, str]] = {}
    for stream, columns in declared.items():
        if not isinstance(columns, dict):
            raise ConfigError(f"config.columns.{stream} must be an object: {{column: type}}")
        parsed[stream] = {}
        for column, type_name in columns.items():
            where = f"config.columns.{stream}.{column}"
            if not isinstance(type_name, str):
                raise ConfigError(f"{where} must be a type name")
            try:
                parsed[stream][column] = neutral(type_name)
            except TypeNameError as exc:
                raise ConfigError(f"{where}: {exc}") from exc
    return parsed


def _parse_s3(config: dict[str, Any], is_s3: bool, resolved: bool) -> s3.S3Settings | None:
    given = [key for key in _S3_KEYS if key in config]
    if not is_s3:
        if given:
            raise ConfigError(f"config.{given[0]} applies only to an s3:// config.url")
        return None
    for key in ("endpoint_url", "region"):
        if not isinstance(config.get(key, ""), str):
            raise ConfigError(f"config.{key} must be a string")
    access_key = config.get("access_key_id", "")
    secret = config.get("secret_access_key", "")
    if bool(access_key) != bool(secret):
        raise ConfigError(
            "config.access_key_id and config.secret_access_key go together; give both, or "
            "neither to use the runtime's own AWS credentials"
        )
    if is_reference(access_key):
        check_reference(access_key, "config.access_key_id")
    elif not isinstance(access_key, str):
        raise ConfigError("config.access_key_id must be a string or a secret reference")
    if secret and not resolved:
        if not is_reference(secret):
            raise ConfigError(
                'config.secret_access_key must be a secret reference {"$secret": "NAME"}: '
                "plain credentials are never stored"
            )
        check_reference(secret, "config.secret_access_key")
    if not resolved:
        return None
    if is_reference(access_key) or is_reference(secret):
        raise ConfigError("config has secret references left: resolve them before connect")
    return s3.S3Settings(
        endpoint_url=config.get("endpoint_url", ""),
        region=config.get("region", "") or "us-east-1",
        access_key_id=str(access_key),
        secret_access_key=str(secret),
    )


# ---------------------------------------------------------------- writing


class _Writer:
    """Appends encoded rows to a file, a batch at a time, in a thread. A
    bad value names its row, counted over everything this writer wrote."""

    def __init__(self, handle: IO[bytes], config: FileConfig, columns: Sequence[Column]) -> None:
        self.handle = handle
        self.rows = 0
        if config.format == "csv":
            self.encode = csv_encoder(columns, config.delimiter)
        else:
            self.encode = jsonl_encoder(columns)

    @classmethod
    async def open(
        cls, path: Path, config: FileConfig, columns: Sequence[Column], header: bool
    ) -> _Writer:
        def start() -> IO[bytes]:
            needs_newline = path.exists() and not _ends_with_newline(path)
            handle = path.open("ab")
            if needs_newline:
                handle.write(b"\n")
            if header and config.format == "csv" and config.header:
                handle.write(csv_header(columns, config.delimiter))
            return handle

        return cls(await asyncio.to_thread(start), config, columns)

    async def write(self, rows: Sequence[Row]) -> None:
        if not rows:
            return
        await asyncio.to_thread(self._write, rows)
        self.rows += len(rows)

    def _write(self, rows: Sequence[Row]) -> None:
        try:
            data = self.encode(rows)
        except ValueFault as fault:
            raise fault.located(None, self.rows) from fault
        self.handle.write(data)

    async def write_lines(self, lines: CopyBatch) -> None:
        """Lines encoded already (JSON Lines that PostgreSQL rendered)."""
        await asyncio.to_thread(self.handle.write, lines.data)
        self.rows += lines.rows

    async def close(self) -> None:
        def finish() -> None:
            with self.handle:
                self.handle.flush()
                os.fsync(self.handle.fileno())

        await asyncio.to_thread(finish)


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as handle:
        if handle.seek(0, os.SEEK_END) == 0:
            return True
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def _key_positions(columns: Sequence[Column], mode: WriteMode, key: Sequence[str]) -> list[int]:
    if not mode.needs_key:
        return []
    names = [c.name for c in columns]
    if not key:
        raise ProviderError(f"write mode {mode.value} needs a key")
    missing = [k for k in key if k not in names]
    if missing:
        raise ProviderError(f"key columns {missing} are not among the written columns {names}")
    return [names.index(k) for k in key]


@dataclass(frozen=True)
class _Lines:
    """Rows that come as JSON Lines already (write_json_lines)."""

    parts: AsyncIterator[CopyBatch]


@dataclass(frozen=True)
class _Csv:
    """Rows that come as CSV in the hand-off dialect (write_csv): Parquet."""

    parts: AsyncIterator[CopyBatch]


async def _write_all(
    writer: _Writer | files_parquet.ParquetWriter,
    batches: AsyncIterator[Batch] | _Lines | _Csv,
    where: str,
) -> int:
    count = 0
    if isinstance(batches, _Csv):
        assert not isinstance(writer, _Writer)
        async for table in _csv_tables(writer, batches, where):
            await writer.write_arrow(table)
            count += table.num_rows
        return count
    if isinstance(batches, _Lines):
        assert isinstance(writer, _Writer)
        async for lines in batches.parts:
            await writer.write_lines(lines)
            count += lines.rows
        return count
    async for batch in batches:
        await writer.write(batch)
        count += len(batch)
    return count


async def _csv_tables(
    writer: files_parquet.ParquetWriter, csv: _Csv, where: str
) -> AsyncIterator[Any]:
    """Each CSV part as an Arrow table of the Parquet file's schema."""
    from setu_engine.providers.files import parquet_csv

    before = 0
    async for part in csv.parts:
        table = await asyncio.to_thread(
            parquet_csv.table_of, part.data, writer.schema, writer.columns, where, before
        )
        before += table.num_rows
        yield table


def _arrow_joinable(columns: Sequence[Column], positions: list[int], schema: Any) -> bool:
    from setu_engine.providers.files import arrow_join  # pyarrow: the parquet extra

    return arrow_join.joinable(columns, positions, schema)


async def _arrow_batches(
    writer: files_parquet.ParquetWriter, batches: AsyncIterator[Batch]
) -> AsyncIterator[Any]:
    """Written rows as record batches of the Parquet file's schema, each
    converted once, as the plain write converts it."""
    before = 0
    async for batch in batches:
        if batch:
            yield await asyncio.to_thread(writer.batch_of, batch, before)
            before += len(batch)


async def _csv_rows(
    writer: files_parquet.ParquetWriter, csv: _Csv, source: _Source
) -> AsyncIterator[Batch]:
    """Each CSV part as rows, read back as a Parquet file's are (an upsert's written rows)."""
    from setu_engine.providers.files import parquet as files_parquet

    before = 0
    async for table in _csv_tables(writer, csv, source.where):
        yield await asyncio.to_thread(
            files_parquet.table_rows, table, writer.columns, source, before
        )
        before += table.num_rows


# ---------------------------------------------------------------- connector


# What the transfer may ask of a file connector (docs/providers.md).
CAPABILITIES = Capabilities(
    json_lines_in=True,
    # Parquet only, for the columns parquet_csv.py reads exactly (takes_csv).
    csv_in=True,
    counts_rows=True,
    increments="object",
    # A file is rewritten whole: its write answers rows, not RowChanges, and
    # holds no key to refuse a repeat with.
    values_by_format=(
        # CSV has no NULL apart from the empty field (docs/data-types.md).
        ("csv", Values(loses=frozenset({"text:empty", "bytes:empty"}))),
        (
            "parquet",
            Values(
                refuses=frozenset(
                    {
                        "numeric:nan",
                        "numeric:infinity",
                        "numeric:big",
                        "date:infinity",
                        "timestamp:infinity",
                        "timestamptz:infinity",
                    }
                ),
                # A bare numeric is decimal128(38,9): the value, not its scale.
                loses=frozenset({"numeric:scale"}),
            ),
        ),
    ),
)


class FileConnector(Connector):
    capabilities = CAPABILITIES

    def __init__(self, config: FileConfig, storage: _Storage) -> None:
        self.config = config
        self.storage = storage
        self.ext = "." + config.format
        # Rows read from the files by read (CountsRows).
        self.rows_read = 0

    def _ref(self, stream: str) -> str:
        return self.storage.target(stream, self.ext)

    async def test(self) -> str:
        return await self.storage.test(self.ext)

    async def discover(self) -> list[Stream]:
        streams = []
        for ref in await self.storage.list_files(self.ext):
            source = _Source(self.storage.where(ref), PurePosixPath(ref).stem)
            key: tuple[str, ...] = ()
            if self.config.format == "parquet":
                require_pyarrow()
                from setu_engine.providers.files import parquet as files_parquet

                declared = self.config.declared(source.stream)
                columns, key = await files_parquet.parquet_stream(
                    self.storage, ref, source, declared
                )
            elif (described := await self._described(ref, source)) is not None:
                columns, key = described
            else:
                columns = await self._sample(ref, source)
            locator = {"url": source.where}
            streams.append(Stream(source.stream, tuple(columns), primary_key=key, locator=locator))
        return streams

    async def _described(
        self, ref: str, source: _Source
    ) -> tuple[list[Column], tuple[str, ...]] | None:
        """A text file's columns and key from its schema sidecar, or None."""
        declared = self.config.declared(source.stream)
        if self.config.format == "jsonl":
            return await sidecar.jsonl_described(self.storage, ref, source, declared)
        options = await self._csv_options(ref, source.stream)
        return await sidecar.csv_described(self.storage, ref, source, declared, options)

    async def _csv_options(self, ref: str, stream: str) -> files_csv.CsvOptions:
        """How a CSV file reads: a headerless file that `csv.column_names`
        does not name takes its column names from its sidecar, when it has
        one (else they are c1, c2, …)."""
        options = self.config.csv
        if self.config.format != "csv" or options.header or options.names_for(stream):
            return options
        schema = await sidecar.read(self.storage, ref)
        if schema is None:
            return options
        return replace(options, column_names={stream: tuple(schema.names())})

    async def _sample(self, ref: str, source: _Source) -> list[Column]:
        declared = self.config.declared(source.stream)
        if self.config.format == "jsonl":
            values: dict[str, list[Any]] = {}
            order: list[str] = []
            async for chunk in _head(jsonl_records(self.storage.chunks(ref), source)):
                for _, record in chunk:
                    _merge_order(order, record)
                    for name, value in record.items():
                        values.setdefault(name, []).extend([] if value is None else [value])
            names = order + [name for name in declared if name not in values]
            return [Column(n, declared.get(n) or infer_json(values.get(n, []))) for n in names]
        if self.config.format == "parquet":
            require_pyarrow()
            from setu_engine.providers.files import parquet as files_parquet

            return await files_parquet.parquet_columns(self.storage, ref, source, declared)
        records = files_csv.csv_records(self.storage.chunks(ref), self.config.csv, source)
        return await files_csv.infer(records, self.config.csv, source, declared)

    async def preview(self, stream: Stream, limit: int) -> Batch:
        if limit <= 0:
            return []
        async with aclosing(self.read(stream, limit)) as batches:
            async for batch in batches:
                return batch
        return []

    async def objects(self, stream: Stream) -> dict[str, tuple[str, str]]:
        """The stream's file as an object (setu_engine/planning/incremental.py): by name,
        its signature and modification time."""
        ref = self._ref(stream.name)
        return {PurePosixPath(ref).name: await self.storage.version(ref)}

    async def read(self, stream: Stream, batch_rows: int) -> AsyncGenerator[Batch, None]:
        if stream.since is not None and stream.since.empty:
            return  # incremental, and its file has not changed since the last run
        ref = self._ref(stream.name)
        source = _Source(self.storage.where(ref), stream.name)
        options = await self._csv_options(ref, stream.name)
        batch: Batch = []
        rows_of = self._rows(ref, source, stream.columns, rewrite=False, options=options)
        async with aclosing(rows_of) as chunks:
            async for rows in chunks:
                self.rows_read += len(rows)
                for row in rows:
                    batch.append(row)
                    if len(batch) >= batch_rows:
                        yield batch
                        batch = []
        if batch:
            yield batch

    def _rows(
        self,
        ref: str,
        source: _Source,
        columns: Sequence[Column],
        rewrite: bool,
        options: files_csv.CsvOptions | None = None,
    ) -> AsyncGenerator[list[Row], None]:
        """The file's rows as the given columns. For a rewrite (the old rows
        of a file being written) a column the new rows lack is an error, as
        the rewrite would drop it."""
        if self.config.format == "parquet":
            require_pyarrow()
            from setu_engine.providers.files import parquet as files_parquet

            return files_parquet.parquet_rows(self.storage, ref, source, columns, rewrite)
        chunks = self.storage.chunks(ref)
        if self.config.format == "jsonl":
            return _jsonl_rows(jsonl_records(chunks, source), source, columns, rewrite)
        options = options or self.config.csv
        records = files_csv.csv_records(chunks, options, source)
        return files_csv.csv_rows(records, options, source, columns, rewrite)

    def _keyed(
        self, ref: str, source: _Source, columns: Sequence[Column], positions: list[int]
    ) -> AsyncGenerator[files_merge.Old, None] | AsyncGenerator[list[Row], None]:
        """The old rows of a file being upserted or merged into, as the join
        needs them: JSON Lines and Parquet decode only the keys of the rows
        replaced (keyed.py, parquet.py); CSV rows come whole."""
        if self.config.format == "parquet":
            require_pyarrow()
            from setu_engine.providers.files import parquet as files_parquet

            return files_parquet.parquet_keyed(self.storage, ref, source, columns, positions)
        if self.config.format == "jsonl":
            return jsonl_keyed(self.storage.chunks(ref), source, columns, positions)
        return self._rows(ref, source, columns, rewrite=True)

    async def write(
        self,
        stream: str,
        columns: Sequence[Column],
        batches: AsyncIterator[Batch],
        mode: WriteMode,
        key: Sequence[str],
        *,
        schema: str | None = None,
        marker: LoadMarker | None = None,
        changes: SchemaChanges | None = None,
    ) -> int:
        # `changes` stays None: files have no shape to inspect or change
        # (setu_engine/planning/destination_plan.py), and no transactional DDL either.
        return await self._write_stream(
            stream, columns, batches, mode, key, schema=schema, marker=marker
        )

    def takes_json_lines(self, mode: WriteMode) -> bool:
        """Whether write_json_lines can write under the mode: any, into JSON
        Lines (an upsert or merge keys each line by its key's fields)."""
        return self.config.format == "jsonl"

    async def write_json_lines(
        self,
        stream: str,
        columns: Sequence[Column],
        parts: AsyncIterator[CopyBatch],
        mode: WriteMode,
        *,
        schema: str | None = None,
        marker: LoadMarker | None = None,
        changes: SchemaChanges | None = None,
        key: Sequence[str] = (),
    ) -> int:
        """Writes rows that come as JSON Lines already, spelled as this
        provider spells them, as write does; `key` is the stream's, kept
        in the file's schema sidecar."""
        if not self.takes_json_lines(mode):
            raise ProviderError(f"JSON Lines cannot be written as {self.config.format} {mode}")
        return await self._write_stream(
            stream, columns, _Lines(parts), mode, key, schema=schema, marker=marker
        )

    def takes_csv(self, columns: Sequence[Column]) -> bool:
        """Whether write_csv can write these columns: into Parquet, each of
        a type Arrow's CSV reader lands exactly (parquet_csv.py)."""
        if self.config.format != "parquet":
            return False
        require_pyarrow()
        from setu_engine.providers.files import parquet as files_parquet
        from setu_engine.providers.files import parquet_csv

        return parquet_csv.takes(files_parquet.arrow_schema(columns), columns)

    async def write_csv(
        self,
        stream: str,
        columns: Sequence[Column],
        parts: AsyncIterator[CopyBatch],
        mode: WriteMode,
        key: Sequence[str],
        *,
        schema: str | None = None,
        marker: LoadMarker | None = None,
        changes: SchemaChanges | None = None,
    ) -> int:
        """Writes rows that come as CSV in the hand-off dialect, as write does."""
        if not self.takes_csv(columns):
            raise ProviderError(f"CSV cannot be written as {self.config.format}")
        return await self._write_stream(
            stream, columns, _Csv(parts), mode, key, schema=schema, marker=marker
        )

    async def _write_stream(
        self,
        stream: str,
        columns: Sequence[Column],
        batches: AsyncIterator[Batch] | _Lines | _Csv,
        mode: WriteMode,
        key: Sequence[str],
        *,
        schema: str | None = None,
        marker: LoadMarker | None = None,
    ) -> int:
        # One file in the folder: a folder has no schemas.
        stream = f"{schema}.{stream}" if schema else stream
        ref = self._ref(stream)
        positions = _key_positions(columns, mode, key)
        if marker is not None:
            recorded = await self._recorded(marker)
            if recorded is not None:
                return recorded  # an earlier attempt loaded it
        source = _Source(self.storage.where(ref), stream)
        temp = await self.storage.temp_file(ref)
        side: Path | None = None
        try:
            exists = mode is not WriteMode.OVERWRITE and await self.storage.exists(ref)
            copied = (
                exists and mode is WriteMode.APPEND and await self._copyable(ref, source, columns)
            )
            kept = exists and mode in (WriteMode.APPEND, WriteMode.UPSERT)
            text = self.config.format != "parquet"  # Parquet's footer holds its schema
            old = await sidecar.read(self.storage, ref) if text and kept else None
            held = sidecar.held(columns, key, old, kept, copied, source.where) if text else None
            count = await self._build(
                ref, temp, source, columns, batches, mode, positions, key, exists, copied
            )
            if held is not None:
                side = await sidecar.staged(self.storage, ref, held, temp)
            # The data first: a sidecar left behind by a cut is stale by its
            # size, and ignored (sidecar.py).
            await self.storage.commit(ref, temp)
            if side is not None:
                await self.storage.commit(sidecar.ref_of(ref), side)
            if marker is not None:
                # Written last, atomically: a failure before it leaves no
                # marker and the load runs again. (A file and its marker
                # cannot commit as one; the window is this one call.)
                await self._mark(marker, count)
        except OSError as exc:
            raise file_error(exc, f"cannot write {self.storage.where(ref)}") from exc
        finally:
            await asyncio.to_thread(temp.unlink, missing_ok=True)
            if side is not None:
                await asyncio.to_thread(side.unlink, missing_ok=True)
        return count

    async def _build(
        self,
        ref: str,
        temp: Path,
        source: _Source,
        columns: Sequence[Column],
        batches: AsyncIterator[Batch] | _Lines | _Csv,
        mode: WriteMode,
        positions: list[int],
        key: Sequence[str],
        exists: bool,
        copied: bool,
    ) -> int:
        if copied:
            await self.storage.copy_to(ref, temp)
        writer: _Writer | files_parquet.ParquetWriter
        if self.config.format == "parquet":
            require_pyarrow()
            from setu_engine.providers.files import parquet as files_parquet

            # The key rides in the file's metadata, so discover offers it back.
            writer = await files_parquet.ParquetWriter.open(temp, self.config, columns, key)
        else:
            writer = await _Writer.open(temp, self.config, columns, header=not copied)
        try:
            if mode is WriteMode.APPEND and exists and not copied:
                async with aclosing(self._rows(ref, source, columns, rewrite=True)) as old:
                    async for rows in old:
                        await writer.write(rows)
            if not mode.needs_key:
                return await _write_all(writer, batches, source.where)
            keep_old = mode is WriteMode.UPSERT
            if not isinstance(writer, _Writer) and _arrow_joinable(
                columns, positions, writer.schema
            ):
                return await self._joined(
                    writer, ref, source, columns, batches, positions, exists, keep_old
                )
            # The written values spill to disk; their keys stay in memory.
            lines = self._lines(writer, columns)
            if isinstance(batches, _Lines):
                assert lines is not None  # JSON Lines only
                keys_of = functools.partial(
                    line_keys, source=source, columns=columns, positions=positions
                )
                written = await files_merge.spill_lines(batches.parts, keys_of, lines)
            else:
                columnar = None
                if not isinstance(writer, _Writer):
                    columnar = functools.partial(files_parquet.ArrowSpill, writer)
                if isinstance(batches, _Csv):
                    assert not isinstance(writer, _Writer)  # Parquet only
                    batches = _csv_rows(writer, batches, source)
                written = await files_merge.spill(batches, positions, lines, columnar)
            try:
                old_rows = self._keyed(ref, source, columns, positions) if exists else _nothing()
                await files_merge.merge(writer.write, old_rows, written, positions, keep_old)
                return written.count
            finally:
                await asyncio.to_thread(written.close)
        finally:
            await writer.close()

    async def _joined(
        self,
        writer: files_parquet.ParquetWriter,
        ref: str,
        source: _Source,
        columns: Sequence[Column],
        batches: AsyncIterator[Batch] | _Lines | _Csv,
        positions: list[int],
        exists: bool,
        keep_old: bool,
    ) -> int:
        """A Parquet upsert or merge as a hash join on Arrow tables (arrow_join.py)."""
        from setu_engine.providers.files import arrow_join
        from setu_engine.providers.files import parquet as files_parquet

        assert not isinstance(batches, _Lines)  # JSON Lines only
        written = (
            _csv_tables(writer, batches, source.where)
            if isinstance(batches, _Csv)
            else _arrow_batches(writer, batches)
        )

        def convert(batch: Any, before: int) -> Any:
            return writer.batch_of(files_parquet.batch_rows(batch, columns, source, before), before)

        key = columns[positions[0]]
        key_type = writer.schema.field(key.name).type
        async with contextlib.AsyncExitStack() as stack:
            old = None
            if exists:
                rows = files_parquet.rewritten_batches(self.storage, ref, source, columns)
                old = arrow_join.OldFile(
                    functools.partial(
                        files_parquet.key_column, self.storage, ref, source, key, key_type
                    ),
                    await stack.enter_async_context(aclosing(rows)),
                )
            return await arrow_join.join(
                written, old, writer.schema, key.name, convert, writer.write_arrow, keep_old
            )

    def _lines(
        self, writer: _Writer | files_parquet.ParquetWriter, columns: Sequence[Column]
    ) -> files_merge.Lines | None:
        """A text format's upsert spills encoded lines (Parquet: rows)."""
        if not isinstance(writer, _Writer):
            return None
        encode = line_encoder(columns, self.config.format, self.config.delimiter)
        return files_merge.Lines(encode, writer.write_lines)

    async def _recorded(self, marker: LoadMarker) -> int | None:
        """The rows an earlier load of this piece recorded, or None."""
        ref = self.storage.beside(f"{MARKERS}/{marker.file_name()}")
        if not await self.storage.exists(ref):
            return None
        document = b"".join([b"".join(lines) async for lines in self.storage.chunks(ref)])
        return marker.rows_in(document)

    async def _mark(self, marker: LoadMarker, rows: int) -> None:
        ref = self.storage.beside(f"{MARKERS}/{marker.file_name()}")
        temp = await self.storage.temp_file(ref)
        try:
            await asyncio.to_thread(temp.write_bytes, marker.document(rows))
            await self.storage.commit(ref, temp)
        finally:
            await asyncio.to_thread(temp.unlink, missing_ok=True)

    async def _copyable(self, ref: str, source: _Source, columns: Sequence[Column]) -> bool:
        """Whether the old file's bytes can start the new file as they are."""
        if self.config.format != "csv":
            return self.config.format == "jsonl"  # Parquet's footer is at its end
        if self.config.csv.encoding != "utf-8" or self.config.csv.quote != '"':
            return False  # new rows are written in UTF-8, quoted with "
        chunks = files_csv.csv_records(self.storage.chunks(ref), self.config.csv, source)
        record = await files_csv.first_record(chunks)
        if record is not None and self.config.header:
            return record == [c.name for c in columns]
        return record is None or len(record) == len(columns)

    async def close(self) -> None:
        await self.storage.close()


def _merge_order(order: list[str], record: dict[str, Any]) -> None:
    """Adds a record's new keys to the column order, each after the key
    before it in the record: a key some records leave out (a json column's
    SQL NULL, docs/data-types.md) keeps its place."""
    known = set(order)
    previous: str | None = None
    for name in record:
        if name not in known:
            at = order.index(previous) + 1 if previous is not None else 0
            order.insert(at, name)
            known.add(name)
        previous = name


class FileProvider:
    capabilities = CAPABILITIES
    name = "file"

    def validate_config(self, config: dict[str, Any]) -> None:
        parse_config(config, resolved=False)

    async def connect(
        self, config: dict[str, Any], egress: Egress | None = None, *, root: Path | None = None
    ) -> Connector:
        parsed = parse_config(config, resolved=True)
        named_file = PurePosixPath(parsed.url).suffix.lower() in FORMATS
        if parsed.s3 is not None:
            bucket, key = s3.parse_s3_url(parsed.url)
            single = named_file and not key.endswith("/")
            settings = replace(parsed.s3, egress=egress, ambient_credentials=egress is None)
            await s3.vet_endpoint(settings)
            return FileConnector(parsed, _S3Files(settings, bucket, key, single))
        path = Path(parsed.url)
        single = named_file or await asyncio.to_thread(path.is_file)
        return FileConnector(parsed, _LocalFiles(path, single, root))


PROVIDER = FileProvider()
