"""The `file` provider: CSV and JSON Lines files in a local folder or under
an S3 prefix, one stream per file (named by the file's stem).

Reading streams line by line (a thread for local files, the response body
for S3), so no file is ever whole in memory. Types are inferred from the
first rows unless declared in `config.columns`.

CSV cannot tell NULL from the empty string: an empty field reads as NULL,
and NULL and '' both write as an empty field.

Writing builds the new file beside the old one (local) or on local disk
(S3) and swaps it in at the end, so a failure leaves the old file as it was.
Upsert and merge hold the written rows in memory, keyed, to match them
against the existing file.

Value conversion and record parsing live in files_codec; the local and S3
storage in files_storage.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import IO, Any

from setu_agent.engine import s3
from setu_agent.engine.markers import MARKERS, LoadMarker
from setu_agent.engine.providers.base import (
    ConfigError,
    Connector,
    Egress,
    ProviderError,
    WriteMode,
)
from setu_agent.engine.providers.failures import file_error
from setu_agent.engine.providers.files_codec import (
    _check_header,
    _csv_rows,
    _head,
    _jsonl_rows,
    _nothing,
    _Source,
    csv_records,
    infer_json,
    infer_text,
    jsonl_records,
    to_json,
    to_text,
)
from setu_agent.engine.providers.files_storage import _LocalFiles, _S3Files, _Storage
from setu_agent.engine.secrets import check_reference, is_reference
from setu_agent.engine.types import Batch, Column, Row, Stream, TypeNameError, neutral

FORMATS = {".csv": "csv", ".jsonl": "jsonl"}
_S3_KEYS = ("endpoint_url", "region", "access_key_id", "secret_access_key")
_KEYS = ("url", "format", "csv", "columns", *_S3_KEYS)

# ---------------------------------------------------------------- config


@dataclass(frozen=True)
class FileConfig:
    url: str
    format: str
    delimiter: str = ","
    header: bool = True
    columns: dict[str, dict[str, str]] | None = None
    s3: s3.S3Settings | None = None

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
        raise ConfigError("config.format is required when config.url is a folder: csv or jsonl")
    if fmt not in ("csv", "jsonl"):
        raise ConfigError(f"config.format must be csv or jsonl, not {fmt!r}")
    delimiter, header = _parse_csv(config.get("csv", {}))
    return FileConfig(
        url=url,
        format=fmt,
        delimiter=delimiter,
        header=header,
        columns=_parse_columns(config.get("columns", {})),
        s3=_parse_s3(config, url.startswith("s3://"), resolved),
    )


def _parse_csv(options: Any) -> tuple[str, bool]:
    if not isinstance(options, dict):
        raise ConfigError("config.csv must be an object: {delimiter, header}")
    if extra := sorted(set(options) - {"delimiter", "header"}):
        raise ConfigError(f"config.csv.{extra[0]} is not a CSV option; use delimiter or header")
    delimiter = options.get("delimiter", ",")
    if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in '"\r\n':
        raise ConfigError("config.csv.delimiter must be one character (not a quote or newline)")
    header = options.get("header", True)
    if not isinstance(header, bool):
        raise ConfigError("config.csv.header must be true or false")
    return delimiter, header


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
    """Appends encoded rows to a file, in a thread."""

    def __init__(self, handle: IO[str], config: FileConfig, columns: Sequence[Column]) -> None:
        self.handle = handle
        self.config = config
        self.columns = list(columns)
        self.names = [json.dumps(c.name, ensure_ascii=False) for c in columns]

    @classmethod
    async def open(
        cls, path: Path, config: FileConfig, columns: Sequence[Column], header: bool
    ) -> _Writer:
        def start() -> IO[str]:
            needs_newline = path.exists() and not _ends_with_newline(path)
            handle = path.open("a", encoding="utf-8", newline="")
            if needs_newline:
                handle.write("\n")
            return handle

        writer = cls(await asyncio.to_thread(start), config, columns)
        if header and config.format == "csv" and config.header:
            await asyncio.to_thread(writer._csv, [tuple(c.name for c in columns)], raw=True)
        return writer

    async def write(self, rows: Sequence[Row]) -> None:
        if not rows:
            return
        if self.config.format == "csv":
            await asyncio.to_thread(self._csv, rows)
        else:
            await asyncio.to_thread(self._jsonl, rows)

    def _csv(self, rows: Sequence[Row], raw: bool = False) -> None:
        out = csv.writer(self.handle, delimiter=self.config.delimiter, lineterminator="\n")
        if raw:
            out.writerows(rows)
            return
        types = [c.type for c in self.columns]
        out.writerows([_csv_field(v, t) for v, t in zip(row, types, strict=True)] for row in rows)

    def _jsonl(self, rows: Sequence[Row]) -> None:
        buffer = io.StringIO()
        for row in rows:
            pairs = (f"{n}:{to_json(v)}" for n, v in zip(self.names, row, strict=True))
            buffer.write("{" + ",".join(pairs) + "}\n")
        self.handle.write(buffer.getvalue())

    async def close(self) -> None:
        def finish() -> None:
            with self.handle:
                self.handle.flush()
                os.fsync(self.handle.fileno())

        await asyncio.to_thread(finish)


def _csv_field(value: Any, type_: str) -> str:
    if value is None:
        return ""
    return to_json(value) if type_ == "json" else to_text(value)


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


def _key(row: Row, positions: list[int]) -> tuple[Any, ...]:
    value = tuple(row[i] for i in positions)
    try:
        hash(value)
    except TypeError as exc:
        raise ProviderError(f"key value {value!r} cannot be compared (a JSON value?)") from exc
    return value


async def _write_all(writer: _Writer, batches: AsyncIterator[Batch]) -> int:
    count = 0
    async for batch in batches:
        await writer.write(batch)
        count += len(batch)
    return count


async def _collect(
    batches: AsyncIterator[Batch], positions: list[int]
) -> tuple[dict[Any, Row], int]:
    """The written rows by key, the last one winning, and how many came."""
    rows: dict[Any, Row] = {}
    count = 0
    async for batch in batches:
        for row in batch:
            rows[_key(row, positions)] = row
        count += len(batch)
    return rows, count


async def _merge(
    writer: _Writer,
    old: AsyncGenerator[list[Row], None],
    written: dict[Any, Row],
    positions: list[int],
    keep_old: bool,
) -> None:
    """Old rows in place, each replaced by the written row of its key (and
    dropped when there is none, unless keep_old); then the new keys."""
    done: set[Any] = set()
    async with aclosing(old):
        async for rows in old:
            out: list[Row] = []
            for row in rows:
                key = _key(row, positions)
                if key in written:
                    if key not in done:
                        out.append(written[key])
                        done.add(key)
                elif keep_old:
                    out.append(row)
            await writer.write(out)
    await writer.write([row for key, row in written.items() if key not in done])


# ---------------------------------------------------------------- connector


class FileConnector(Connector):
    def __init__(self, config: FileConfig, storage: _Storage) -> None:
        self.config = config
        self.storage = storage
        self.ext = "." + config.format

    def _ref(self, stream: str) -> str:
        return self.storage.target(stream, self.ext)

    async def test(self) -> str:
        return await self.storage.test(self.ext)

    async def discover(self) -> list[Stream]:
        streams = []
        for ref in await self.storage.list_files(self.ext):
            source = _Source(self.storage.where(ref), PurePosixPath(ref).stem)
            columns = await self._sample(ref, source)
            locator = {"url": source.where}
            streams.append(Stream(name=source.stream, columns=tuple(columns), locator=locator))
        return streams

    async def _sample(self, ref: str, source: _Source) -> list[Column]:
        declared = self.config.declared(source.stream)
        if self.config.format == "jsonl":
            values: dict[str, list[Any]] = {}
            async for chunk in _head(jsonl_records(self.storage.chunks(ref), source)):
                for _, record in chunk:
                    for name, value in record.items():
                        values.setdefault(name, []).extend([] if value is None else [value])
            names = list(values) + [name for name in declared if name not in values]
            return [Column(n, declared.get(n) or infer_json(values.get(n, []))) for n in names]
        records: list[list[str]] = []
        chunks = csv_records(self.storage.chunks(ref), self.config.delimiter, source)
        async for part in _head(chunks):
            records.extend(record for _, record in part if record)
        header = records.pop(0) if records and self.config.header else None
        names = header or [f"c{i + 1}" for i in range(len(records[0]) if records else 0)]
        _check_header(names, source)
        for name in declared:
            if name not in names:
                where = f"config.columns.{source.stream}.{name}"
                raise ProviderError(f"{where}: {source.where} has no such column")
        return [
            Column(name, declared.get(name) or infer_text(_sampled(records, i)))
            for i, name in enumerate(names)
        ]

    async def preview(self, stream: Stream, limit: int) -> Batch:
        if limit <= 0:
            return []
        async with aclosing(self.read(stream, limit)) as batches:
            async for batch in batches:
                return batch
        return []

    async def read(self, stream: Stream, batch_rows: int) -> AsyncGenerator[Batch, None]:
        ref = self._ref(stream.name)
        source = _Source(self.storage.where(ref), stream.name)
        batch: Batch = []
        async with aclosing(self._rows(ref, source, stream.columns, rewrite=False)) as chunks:
            async for rows in chunks:
                for row in rows:
                    batch.append(row)
                    if len(batch) >= batch_rows:
                        yield batch
                        batch = []
        if batch:
            yield batch

    def _rows(
        self, ref: str, source: _Source, columns: Sequence[Column], rewrite: bool
    ) -> AsyncGenerator[list[Row], None]:
        """The file's rows as the given columns. For a rewrite (the old rows
        of a file being written) a column the new rows lack is an error, as
        the rewrite would drop it."""
        chunks = self.storage.chunks(ref)
        if self.config.format == "jsonl":
            return _jsonl_rows(jsonl_records(chunks, source), source, columns, rewrite)
        records = csv_records(chunks, self.config.delimiter, source)
        return _csv_rows(records, source, columns, self.config.header, rewrite)

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
    ) -> int:
        # One file in the folder: a folder has no schemas.
        stream = f"{schema}.{stream}" if schema else stream
        ref = self._ref(stream)
        positions = _key_positions(columns, mode, key)
        if marker is not None:
            recorded = await self._recorded(marker)
            if recorded is not None:
                return recorded  # an earlier attempt loaded it
        temp = await self.storage.temp_file(ref)
        try:
            count = await self._build(ref, temp, stream, columns, batches, mode, positions)
            await self.storage.commit(ref, temp)
            if marker is not None:
                # Written last, atomically: a failure before it leaves no
                # marker and the load runs again. (A file and its marker
                # cannot commit as one; the window is this one call.)
                await self._mark(marker, count)
        except OSError as exc:
            raise file_error(exc, f"cannot write {self.storage.where(ref)}") from exc
        finally:
            await asyncio.to_thread(temp.unlink, missing_ok=True)
        return count

    async def _build(
        self,
        ref: str,
        temp: Path,
        stream: str,
        columns: Sequence[Column],
        batches: AsyncIterator[Batch],
        mode: WriteMode,
        positions: list[int],
    ) -> int:
        source = _Source(self.storage.where(ref), stream)
        exists = mode is not WriteMode.OVERWRITE and await self.storage.exists(ref)
        copied = exists and mode is WriteMode.APPEND and await self._copyable(ref, source, columns)
        if copied:
            await self.storage.copy_to(ref, temp)
        writer = await _Writer.open(temp, self.config, columns, header=not copied)
        try:
            if mode is WriteMode.APPEND and exists and not copied:
                async with aclosing(self._rows(ref, source, columns, rewrite=True)) as old:
                    async for rows in old:
                        await writer.write(rows)
            if not mode.needs_key:
                return await _write_all(writer, batches)
            written, count = await _collect(batches, positions)
            old_rows = self._rows(ref, source, columns, rewrite=True) if exists else _nothing()
            await _merge(writer, old_rows, written, positions, keep_old=mode is WriteMode.UPSERT)
            return count
        finally:
            await writer.close()

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
        if self.config.format == "jsonl":
            return True
        chunks = csv_records(self.storage.chunks(ref), self.config.delimiter, source)
        async with aclosing(chunks):
            async for chunk in chunks:
                for _, record in chunk:
                    if record and self.config.header:
                        return record == [c.name for c in columns]
                    if record:
                        return len(record) == len(columns)
        return True

    async def close(self) -> None:
        await self.storage.close()


def _sampled(records: list[list[str]], index: int) -> list[str]:
    return [r[index] for r in records if index < len(r) and r[index] != ""]


class FileProvider:
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
