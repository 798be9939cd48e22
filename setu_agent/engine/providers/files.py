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
"""

from __future__ import annotations

import asyncio
import base64
import csv
import io
import json
import math
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, aclosing
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal, InvalidOperation
from pathlib import Path, PurePosixPath
from typing import IO, Any, Protocol, TypeVar

from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]

from setu_agent.engine import s3
from setu_agent.engine.providers.base import ConfigError, Connector, ProviderError, WriteMode
from setu_agent.engine.secrets import check_reference, is_reference
from setu_agent.engine.types import INTEGERS, Batch, Column, Row, Stream, TypeNameError, neutral

FORMATS = {".csv": "csv", ".jsonl": "jsonl"}
_S3_KEYS = ("endpoint_url", "region", "access_key_id", "secret_access_key")
_KEYS = ("url", "format", "csv", "columns", *_S3_KEYS)
SAMPLE_ROWS = 1000
READ_HINT = 1024 * 1024

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


# ---------------------------------------------------------------- values


_INT = re.compile(r"^[+-]?\d+$", re.ASCII)
_DECIMAL = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$", re.ASCII)
_LIMITS = {"smallint": 2**15, "integer": 2**31, "bigint": 2**63}
_TRUE = frozenset({"true", "t", "yes", "y", "1"})
_FALSE = frozenset({"false", "f", "no", "n", "0"})


def _integer(value: int, type_: str) -> int:
    limit = _LIMITS[type_]
    if not -limit <= value < limit:
        raise ValueError(f"out of range for {type_}")
    return value


def from_text(text: str, type_: str) -> Any:
    """A value's neutral form from its text form; raises ValueError."""
    if type_ == "text":
        return text
    if type_ in INTEGERS:
        if not _INT.match(text.strip()):
            raise ValueError("not an integer")
        return _integer(int(text), type_)
    if type_ in ("real", "double"):
        return float(text)
    if type_ == "numeric":
        if "_" in text:
            raise ValueError("not a number")
        try:
            return Decimal(text.strip())
        except InvalidOperation as exc:
            raise ValueError("not a number") from exc
    if type_ == "boolean":
        word = text.strip().lower()
        if word not in _TRUE | _FALSE:
            raise ValueError("not true or false")
        return word in _TRUE
    return _TEXT_PARSERS[type_](text)


def _time(text: str) -> time:
    value = time.fromisoformat(text)
    if value.tzinfo is not None:
        raise ValueError("a time with a time zone")
    return value


def _timestamp(text: str) -> datetime:
    value = datetime.fromisoformat(text)
    if value.tzinfo is not None:
        raise ValueError("a timestamp with a time zone; declare the column timestamptz")
    return value


def _timestamptz(text: str) -> datetime:
    # A timestamp without an offset is taken as UTC rather than the machine's zone.
    value = datetime.fromisoformat(text)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


_TEXT_PARSERS: dict[str, Callable[[str], Any]] = {
    "bytes": lambda text: base64.b64decode(text, validate=True),
    "date": date.fromisoformat,
    "time": _time,
    "timestamp": _timestamp,
    "timestamptz": _timestamptz,
    "uuid": uuid.UUID,
    "json": json.loads,
}


def from_json(value: Any, type_: str) -> Any:
    """A value's neutral form from a decoded JSON value (floats as Decimal)."""
    if value is None:
        return None
    if type_ == "json":
        return _plain(value)
    if type_ == "text":
        return value if isinstance(value, str) else to_json(value)
    if isinstance(value, str):
        return from_text(value, type_)
    if isinstance(value, bool):
        if type_ != "boolean":
            raise ValueError(f"a boolean is not a {type_}")
        return value
    if not isinstance(value, int | Decimal) or type_ == "boolean":
        raise ValueError(f"{type(value).__name__} is not a {type_}")
    if type_ in INTEGERS:
        if value != int(value):
            raise ValueError("not an integer")
        return _integer(int(value), type_)
    if type_ in ("real", "double"):
        return float(value)
    if type_ == "numeric":
        return Decimal(value)
    raise ValueError(f"a number is not a {type_}")


def _plain(value: Any) -> Any:
    """Decoded JSON as json.loads would give it (floats, not Decimals)."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def to_json(value: Any) -> str:
    """JSON text for a neutral value; a Decimal is written as its exact digits."""
    if isinstance(value, Decimal):
        return str(value) if value.is_finite() else json.dumps(str(value))
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(str(value))
    if isinstance(value, dict):
        items = (f"{json.dumps(str(k), ensure_ascii=False)}:{to_json(v)}" for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(to_json(v) for v in value) + "]"
    if isinstance(value, str | bool | int | float) or value is None:
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(to_text(value), ensure_ascii=False)


def to_text(value: Any) -> str:
    """A non-null value's text form, as CSV writes it and from_text reads it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict | list):
        return to_json(value)
    return str(value)


def infer_text(values: Sequence[str]) -> str:
    """The type of a CSV column from its non-empty sampled fields."""
    if not values:
        return "text"
    if all(_INT.match(v) for v in values):
        fits = all(-(2**63) <= int(v) < 2**63 for v in values)
        return "bigint" if fits else "numeric"
    if all(_DECIMAL.match(v) for v in values):
        return "numeric"
    if all(v.lower() in ("true", "false") for v in values):
        return "boolean"
    return "text"


def infer_json(values: Sequence[Any]) -> str:
    """The type of a JSON Lines field from its non-null sampled values."""
    kinds = {_json_kind(v) for v in values}
    if not kinds:
        return "text"
    if kinds == {"int"}:
        fits = all(-(2**63) <= v < 2**63 for v in values)
        return "bigint" if fits else "numeric"
    if kinds <= {"int", "float"}:
        return "double"
    if len(kinds) == 1:
        return kinds.pop()
    return "text"


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "int"
    if isinstance(value, Decimal | float):
        return "float"
    if isinstance(value, dict | list):
        return "json"
    return "text"


# ---------------------------------------------------------------- records


@dataclass(frozen=True)
class _Source:
    """One file being read: where it is, for messages, and its stream."""

    where: str
    stream: str


async def csv_records(
    chunks: AsyncGenerator[list[bytes], None], delimiter: str, source: _Source
) -> AsyncGenerator[list[tuple[int, list[str]]], None]:
    """(line number, fields) of each record. Lines are joined while a quoted
    field is open (an odd count of quotes so far, as doubled quotes inside a
    field keep the count even), so a field may hold newlines."""
    pending: list[str] = []
    quotes = start = number = 0
    async with aclosing(chunks):
        async for lines in chunks:
            records: list[tuple[int, list[str]]] = []
            for raw in lines:
                number += 1
                text = _decode(raw, number, source)
                if not pending:
                    start = number
                pending.append(text)
                quotes += text.count('"')
                if quotes % 2 == 0:
                    records.append((start, _parse_record(pending, delimiter, source, start)))
                    pending, quotes = [], 0
            yield records
    if pending:
        raise ProviderError(f"{source.where}: line {start}: a quoted field is never closed")


def _parse_record(lines: list[str], delimiter: str, source: _Source, line: int) -> list[str]:
    try:
        rows = list(csv.reader(lines, delimiter=delimiter, strict=True))
    except csv.Error as exc:
        raise ProviderError(f"{source.where}: line {line}: {exc}") from exc
    if len(rows) > 1:
        raise ProviderError(f"{source.where}: line {line}: a stray quote in an unquoted field")
    return rows[0] if rows else []


async def jsonl_records(
    chunks: AsyncGenerator[list[bytes], None], source: _Source
) -> AsyncGenerator[list[tuple[int, dict[str, Any]]], None]:
    number = 0
    async with aclosing(chunks):
        async for lines in chunks:
            records: list[tuple[int, dict[str, Any]]] = []
            for raw in lines:
                number += 1
                text = _decode(raw, number, source).strip()
                if text:
                    records.append((number, _parse_object(text, source, number)))
            yield records


def _parse_object(text: str, source: _Source, line: int) -> dict[str, Any]:
    try:
        record = json.loads(text, parse_float=Decimal)
    except ValueError as exc:
        raise ProviderError(f"{source.where}: line {line}: invalid JSON: {exc}") from exc
    if not isinstance(record, dict):
        raise ProviderError(f"{source.where}: line {line}: not a JSON object")
    return record


def _decode(raw: bytes, number: int, source: _Source) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProviderError(f"{source.where}: line {number}: not UTF-8 ({exc.reason})") from exc
    return text.removeprefix("\ufeff") if number == 1 else text


def _bad_value(source: _Source, line: int, column: Column, value: Any, exc: Exception) -> Exception:
    return ProviderError(
        f"{source.where}: line {line}, column {column.name!r}: {value!r} is not a valid "
        f"{column.type} ({exc}); the type was inferred from the first {SAMPLE_ROWS} rows, "
        f'declare it in config.columns.{source.stream}.{column.name} (e.g. "text")'
    )


# ---------------------------------------------------------------- storage


class _Storage(Protocol):
    """Where the files are: a local folder or file, or an S3 prefix or key.
    A file is named by a ref: its path, or its key."""

    single: bool

    def target(self, stream: str, ext: str) -> str: ...

    def where(self, ref: str) -> str: ...

    async def list_files(self, ext: str) -> list[str]: ...

    def chunks(self, ref: str) -> AsyncGenerator[list[bytes], None]: ...

    async def exists(self, ref: str) -> bool: ...

    async def temp_file(self, ref: str) -> Path: ...

    async def copy_to(self, ref: str, temp: Path) -> None: ...

    async def commit(self, ref: str, temp: Path) -> None: ...

    async def test(self, ext: str) -> str: ...

    async def close(self) -> None: ...


def _check_stream_name(stream: str) -> None:
    if not stream or "/" in stream or "\\" in stream or stream in (".", ".."):
        raise ProviderError(f"stream name {stream!r} cannot name a file")


class _LocalFiles:
    def __init__(self, path: Path, single: bool) -> None:
        self.path = path
        self.single = single

    def target(self, stream: str, ext: str) -> str:
        _check_stream_name(stream)
        return str(self.path if self.single else self.path / f"{stream}{ext}")

    def where(self, ref: str) -> str:
        return ref

    async def list_files(self, ext: str) -> list[str]:
        def scan() -> list[str]:
            if self.single:
                return [str(self.path)] if self.path.is_file() else []
            return sorted(str(p) for p in self.path.iterdir() if p.suffix == ext and p.is_file())

        try:
            return await asyncio.to_thread(scan)
        except OSError as exc:
            raise ProviderError(f"cannot list {self.path}: {exc.strerror or exc}") from exc

    async def chunks(self, ref: str) -> AsyncGenerator[list[bytes], None]:
        try:
            source = await asyncio.to_thread(open, ref, "rb")
        except OSError as exc:
            raise ProviderError(f"cannot open {ref}: {exc.strerror or exc}") from exc
        try:
            while lines := await asyncio.to_thread(source.readlines, READ_HINT):
                yield lines
        except OSError as exc:
            raise ProviderError(f"cannot read {ref}: {exc.strerror or exc}") from exc
        finally:
            source.close()

    async def exists(self, ref: str) -> bool:
        return await asyncio.to_thread(os.path.isfile, ref)

    async def temp_file(self, ref: str) -> Path:
        # Beside the target, so the final rename stays on one filesystem.
        path = Path(ref)
        try:
            await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
        except OSError as exc:
            raise ProviderError(f"cannot create {path.parent}: {exc.strerror or exc}") from exc
        return path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")

    async def copy_to(self, ref: str, temp: Path) -> None:
        await asyncio.to_thread(shutil.copyfile, ref, temp)

    async def commit(self, ref: str, temp: Path) -> None:
        await asyncio.to_thread(os.replace, temp, ref)

    async def test(self, ext: str) -> str:
        def check() -> str:
            kind = "file" if self.single else "folder"
            exists = self.path.is_file() if self.single else self.path.is_dir()
            if not exists:
                raise ProviderError(f"{kind} {self.path} does not exist")
            if not os.access(self.path, os.R_OK | (0 if self.single else os.X_OK)):
                raise ProviderError(f"{kind} {self.path} is not readable")
            if self.single:
                return f"file {self.path} ({self.path.stat().st_size} bytes)"
            count = sum(1 for p in self.path.iterdir() if p.suffix == ext and p.is_file())
            return f"{count} {ext[1:]} files in {self.path}"

        return await asyncio.to_thread(check)

    async def close(self) -> None:
        return None


class _S3Files:
    def __init__(self, settings: s3.S3Settings, bucket: str, key: str, single: bool) -> None:
        self.settings = settings
        self.bucket = bucket
        self.single = single
        # A prefix names a folder: s3://b/data and s3://b/data/ both list data/.
        self.key = key if single or not key or key.endswith("/") else key + "/"
        self._stack = AsyncExitStack()
        self._client: Any = None
        self._lock = asyncio.Lock()

    async def _open(self) -> Any:
        async with self._lock:
            if self._client is None:
                client = s3.s3_client(self.settings)
                self._client = await self._stack.enter_async_context(client)
        return self._client

    def target(self, stream: str, ext: str) -> str:
        _check_stream_name(stream)
        return self.key if self.single else f"{self.key}{stream}{ext}"

    def where(self, ref: str) -> str:
        return f"s3://{self.bucket}/{ref}"

    def _error(self, ref: str, exc: Exception) -> ProviderError:
        if isinstance(exc, ClientError):
            code = s3.error_code(exc)
            if code == "NoSuchBucket":
                where = self.settings.where()
                return ProviderError(f"bucket {self.bucket} does not exist at {where}")
            if s3.is_not_found(exc):
                return ProviderError(f"{self.where(ref)} does not exist")
            return ProviderError(f"{self.where(ref)}: {s3.error_message(exc)}")
        return ProviderError(f"{self.where(ref)} at {self.settings.where()}: {exc}")

    async def list_files(self, ext: str) -> list[str]:
        client = await self._open()
        keys: list[str] = []
        try:
            pages = client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.key, Delimiter="/"
            )
            async for page in pages:
                keys.extend(item["Key"] for item in page.get("Contents", []))
        except (ClientError, BotoCoreError) as exc:
            raise self._error(self.key, exc) from exc
        if self.single:
            return [key for key in keys if key == self.key]
        return sorted(key for key in keys if PurePosixPath(key).suffix == ext)

    async def chunks(self, ref: str) -> AsyncGenerator[list[bytes], None]:
        client = await self._open()
        try:
            async with aclosing(s3.iter_lines(client, self.bucket, ref)) as lines:
                async for chunk in lines:
                    yield chunk
        except (ClientError, BotoCoreError) as exc:
            raise self._error(ref, exc) from exc

    async def exists(self, ref: str) -> bool:
        client = await self._open()
        try:
            await client.head_object(Bucket=self.bucket, Key=ref)
        except ClientError as exc:
            if s3.is_not_found(exc):
                return False
            raise self._error(ref, exc) from exc
        except BotoCoreError as exc:
            raise self._error(ref, exc) from exc
        return True

    async def temp_file(self, ref: str) -> Path:
        def make() -> Path:
            handle, name = tempfile.mkstemp(prefix="setu-file-", suffix=PurePosixPath(ref).suffix)
            os.close(handle)
            return Path(name)

        return await asyncio.to_thread(make)

    async def copy_to(self, ref: str, temp: Path) -> None:
        try:
            await s3.download(await self._open(), self.bucket, ref, temp)
        except (ClientError, BotoCoreError) as exc:
            raise self._error(ref, exc) from exc

    async def commit(self, ref: str, temp: Path) -> None:
        try:
            await s3.upload(await self._open(), self.bucket, ref, temp)
        except (ClientError, BotoCoreError) as exc:
            raise self._error(ref, exc) from exc

    async def test(self, ext: str) -> str:
        client = await self._open()
        try:
            await client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            if s3.error_code(exc) in ("404", "NoSuchBucket"):
                where = self.settings.where()
                raise ProviderError(f"bucket {self.bucket} does not exist at {where}") from exc
            raise self._error("", exc) from exc
        except BotoCoreError as exc:
            raise self._error("", exc) from exc
        count = len(await self.list_files(ext))
        return f"{count} {ext[1:]} files at {self.where(self.key)}"

    async def close(self) -> None:
        self._client = None
        await self._stack.aclose()


# ---------------------------------------------------------------- rows

T = TypeVar("T")


async def _head(chunks: AsyncGenerator[list[T], None]) -> AsyncGenerator[list[T], None]:
    """The first records of a file (a header and SAMPLE_ROWS rows), then stop."""
    seen = 0
    async with aclosing(chunks):
        async for chunk in chunks:
            yield chunk[: SAMPLE_ROWS + 1 - seen]
            seen += len(chunk)
            if seen > SAMPLE_ROWS:
                return


def _check_header(names: Sequence[str], source: _Source) -> None:
    seen: set[str] = set()
    for index, name in enumerate(names):
        if not name:
            raise ProviderError(f"{source.where}: header column {index + 1} has no name")
        if name in seen:
            raise ProviderError(f"{source.where}: header names column {name!r} twice")
        seen.add(name)


def _dropped(source: _Source, names: Sequence[str]) -> ProviderError:
    return ProviderError(
        f"{source.where} has columns {', '.join(map(repr, names))} that the written rows lack; "
        f"keeping the old rows would drop them: write with mode overwrite to replace the file"
    )


def _csv_plan(
    names: list[str], source: _Source, columns: Sequence[Column], rewrite: bool
) -> list[int | None]:
    """For each wanted column, the index of its field in a record."""
    _check_header(names, source)
    wanted = {c.name for c in columns}
    if rewrite and (extra := [n for n in names if n not in wanted]):
        raise _dropped(source, extra)
    index = {name: i for i, name in enumerate(names)}
    plan: list[int | None] = []
    for column in columns:
        if column.name not in index and not rewrite:
            raise ProviderError(
                f"{source.where} has no column {column.name!r} (it has {', '.join(names)})"
            )
        plan.append(index.get(column.name))
    return plan


def _csv_row(
    fields: list[str], plan: list[int | None], columns: Sequence[Column], source: _Source, line: int
) -> Row:
    values: list[Any] = []
    for index, column in zip(plan, columns, strict=True):
        text = fields[index] if index is not None and index < len(fields) else ""
        try:
            values.append(None if text == "" else from_text(text, column.type))
        except (ValueError, ArithmeticError) as exc:
            raise _bad_value(source, line, column, text, exc) from exc
    return tuple(values)


async def _csv_rows(
    records: AsyncGenerator[list[tuple[int, list[str]]], None],
    source: _Source,
    columns: Sequence[Column],
    has_header: bool,
    rewrite: bool,
) -> AsyncGenerator[list[Row], None]:
    plan: list[int | None] | None = None
    width = 0
    async with aclosing(records):
        async for chunk in records:
            rows: list[Row] = []
            for line, fields in chunk:
                if not fields:
                    continue
                if plan is None:
                    names = _names(fields, columns, has_header, rewrite)
                    plan, width = _csv_plan(names, source, columns, rewrite), len(names)
                    if has_header:
                        continue
                if len(fields) > width:
                    raise ProviderError(
                        f"{source.where}: line {line} has {len(fields)} fields, "
                        f"more than the {width} columns"
                    )
                rows.append(_csv_row(fields, plan, columns, source, line))
            yield rows


def _names(
    first: list[str], columns: Sequence[Column], has_header: bool, rewrite: bool
) -> list[str]:
    if has_header:
        return first
    # Without a header, columns are positional: c1, c2... or, for the old
    # content of a file being written, the written columns in order.
    if rewrite:
        return [c.name for c in columns]
    return [f"c{i + 1}" for i in range(len(first))]


async def _jsonl_rows(
    records: AsyncGenerator[list[tuple[int, dict[str, Any]]], None],
    source: _Source,
    columns: Sequence[Column],
    rewrite: bool,
) -> AsyncGenerator[list[Row], None]:
    wanted = {c.name for c in columns}
    async with aclosing(records):
        async for chunk in records:
            rows: list[Row] = []
            for line, record in chunk:
                if rewrite and not record.keys() <= wanted:
                    raise _dropped(source, sorted(record.keys() - wanted))
                rows.append(
                    tuple(_jsonl_cell(record.get(c.name), c, source, line) for c in columns)
                )
            yield rows


def _jsonl_cell(value: Any, column: Column, source: _Source, line: int) -> Any:
    try:
        return from_json(value, column.type)
    except (ValueError, ArithmeticError) as exc:
        raise _bad_value(source, line, column, _plain(value), exc) from exc


async def _nothing() -> AsyncGenerator[list[Row], None]:
    return
    yield


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
    ) -> int:
        ref = self._ref(stream)
        positions = _key_positions(columns, mode, key)
        temp = await self.storage.temp_file(ref)
        try:
            count = await self._build(ref, temp, stream, columns, batches, mode, positions)
            await self.storage.commit(ref, temp)
        except OSError as exc:
            raise ProviderError(f"cannot write {self.storage.where(ref)}: {exc}") from exc
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

    async def connect(self, config: dict[str, Any]) -> Connector:
        parsed = parse_config(config, resolved=True)
        named_file = PurePosixPath(parsed.url).suffix.lower() in FORMATS
        if parsed.s3 is not None:
            bucket, key = s3.parse_s3_url(parsed.url)
            single = named_file and not key.endswith("/")
            return FileConnector(parsed, _S3Files(parsed.s3, bucket, key, single))
        path = Path(parsed.url)
        single = named_file or await asyncio.to_thread(path.is_file)
        return FileConnector(parsed, _LocalFiles(path, single))


PROVIDER = FileProvider()
