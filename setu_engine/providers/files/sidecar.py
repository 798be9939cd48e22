"""The schema sidecar: a CSV or JSON Lines file's stream schema, written
beside it as `<file>.setu-schema.json` (`users.jsonl.setu-schema.json`), so
a file Setu wrote reads back with the types, nullability and primary key
it was written with, not with what inference guesses from its text.

    {"setu_schema": 1,
     "columns": [{"name": "id", "type": "integer", "nullable": false},
                 {"name": "name", "type": "text", "nullable": false,
                  "sql_type": "character varying(20)"}],
     "primary_key": ["id"],
     "data_bytes": 1234}

`columns` are Column.to_dict's (setu_engine/values/types.py); `data_bytes`
is the size of the data file the sidecar was written with. The two files
cannot be swapped in as one: the data file is committed first, then the
sidecar, so a write cut between the two leaves a sidecar whose size no
longer matches, and the reader ignores it (with a warning) rather than
read the new data with the old schema. A sidecar without `data_bytes` (one
a person wrote for a file of their own) describes whatever file is there.

Parquet writes none: its footer holds the same (types, required fields,
each column's `setu.sql_type`, the key in `setu.primary_key`), committed
with the data by construction (parquet.py).

The sidecar is read from a folder anyone may write to: every field is
checked, and anything wrong is a PermanentError naming the sidecar and the
field, never a crash. A symlink or an S3 key is read through the
connection's storage (storage.py), with its checks: no link out of the
workspace folder.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from setu_engine.errors import PermanentError, SqlTypeError, TypeNameError
from setu_engine.providers.files import csv as files_csv
from setu_engine.providers.files.codec import _head, _Source, jsonl_records
from setu_engine.providers.files.storage import _Storage
from setu_engine.values.types import INTEGERS, Column

log = logging.getLogger("setu.engine")

SUFFIX = ".setu-schema.json"
VERSION = 1
# A sidecar of 10,000 columns with long names and SQL types is under 2 MiB;
# a larger one is not Setu's, and is not read into memory.
MAX_BYTES = 4 * 1024 * 1024
MAX_COLUMNS = 10_000
MAX_NAME = 1024
_KEYS = frozenset({"setu_schema", "columns", "primary_key", "data_bytes"})
_COLUMN_KEYS = frozenset({"name", "type", "nullable", "sql_type"})


@dataclass(frozen=True)
class Schema:
    """What a sidecar says of its data file."""

    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()
    # The data file's size when the sidecar was written; None: not recorded.
    data_bytes: int | None = None

    def names(self) -> list[str]:
        return [c.name for c in self.columns]


def ref_of(data_ref: str) -> str:
    """The sidecar's ref beside a data file's (a path, or an S3 key)."""
    return data_ref + SUFFIX


def document(schema: Schema) -> bytes:
    body: dict[str, Any] = {
        "setu_schema": VERSION,
        "columns": [c.to_dict() for c in schema.columns],
        "primary_key": list(schema.primary_key),
    }
    if schema.data_bytes is not None:
        body["data_bytes"] = schema.data_bytes
    return json.dumps(body, ensure_ascii=False, indent=1).encode("utf-8") + b"\n"


class _Bad(Exception):
    """A field of the sidecar is wrong: (field, reason)."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")


def parse(data: bytes, where: str) -> Schema:
    """The schema a sidecar's bytes say; raises PermanentError naming the
    sidecar (`where`) and the field at fault."""
    try:
        return _parse(data)
    except _Bad as exc:
        raise PermanentError(
            f"{where}: not a valid Setu schema sidecar ({exc}); fix it, or delete it to "
            f"infer the file's types"
        ) from exc


def too_large(where: str) -> PermanentError:
    return PermanentError(
        f"{where}: a schema sidecar larger than {MAX_BYTES} bytes is not Setu's; "
        f"delete it to infer the file's types"
    )


def _parse(data: bytes) -> Schema:
    if len(data) > MAX_BYTES:
        raise _Bad("size", f"more than {MAX_BYTES} bytes")
    try:
        body = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _Bad("document", f"not JSON ({str(exc)[:200]})") from exc
    if not isinstance(body, dict):
        raise _Bad("document", "not a JSON object")
    unknown = sorted(set(body) - _KEYS)
    if unknown:
        raise _Bad(_shown(unknown[0]), f"unknown key; a sidecar has {sorted(_KEYS)}")
    version = body.get("setu_schema")
    if version != VERSION or isinstance(version, bool):
        raise _Bad("setu_schema", f"version {_shown(version)} is not {VERSION}")
    columns = _columns(body.get("columns"))
    names = [c.name for c in columns]
    key = body.get("primary_key", [])
    if not isinstance(key, list) or not all(isinstance(k, str) for k in key):
        raise _Bad("primary_key", "not a list of column names")
    if len(set(key)) != len(key) or not set(key) <= set(names):
        raise _Bad("primary_key", f"{_shown(key)} does not name distinct columns of the file")
    size = body.get("data_bytes")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise _Bad("data_bytes", "not a size in bytes")
    return Schema(tuple(columns), tuple(key), size)


def _columns(value: Any) -> list[Column]:
    if not isinstance(value, list) or not value:
        raise _Bad("columns", "not a non-empty list")
    if len(value) > MAX_COLUMNS:
        raise _Bad("columns", f"more than {MAX_COLUMNS} columns")
    columns: list[Column] = []
    seen: set[str] = set()
    for index, item in enumerate(value):
        where = f"columns[{index}]"
        if not isinstance(item, dict):
            raise _Bad(where, "not an object")
        if unknown := sorted(set(item) - _COLUMN_KEYS):
            raise _Bad(f"{where}.{_shown(unknown[0])}", "unknown key")
        name = item.get("name")
        if not isinstance(name, str) or not name or len(name) > MAX_NAME or "\x00" in name:
            raise _Bad(f"{where}.name", f"not a column name ({_shown(name)})")
        if name in seen:
            raise _Bad(f"{where}.name", f"{_shown(name)} names a column twice")
        seen.add(name)
        if not isinstance(item.get("type"), str):
            raise _Bad(f"{where}.type", "not a type name")
        if not isinstance(item.get("nullable", True), bool):
            raise _Bad(f"{where}.nullable", "not true or false")
        if not isinstance(item.get("sql_type", ""), str):
            raise _Bad(f"{where}.sql_type", "not a SQL type")
        try:
            columns.append(Column.from_dict(item))
        except (TypeNameError, SqlTypeError) as exc:
            raise _Bad(where, str(exc)[:300]) from exc
    return columns


def _shown(value: Any) -> str:
    return repr(value)[:80]


# ---------------------------------------------------------------- after a write

# Neutral types that hold every value of the ones before them in the list.
_WIDER = ("smallint", "integer", "bigint", "numeric")


def held(
    written: Sequence[Column],
    key: Sequence[str],
    old: Schema | None,
    kept: bool,
    copied: bool,
    where: str,
) -> Schema | None:
    """The schema of the file a write leaves: the written columns, and when
    the old file's rows stay (`kept`: append, upsert) what they may hold.

    `copied`: the old file's bytes start the new file as they are (an
    append), so its rows keep their old types: a column both declare must
    be of types one holds the other of, or the write is refused; the old
    file's other columns stay, nullable. Otherwise the old rows were read
    as the written types and written again, so those types hold. A kept
    file without a (current) sidecar holds rows of unknown nullability and
    length: its columns are nullable and of their plain types, and a copied
    one keeps no sidecar at all (its old bytes are another tool's)."""
    if not kept:
        return Schema(tuple(written), _valid_key(key, written))
    if old is None:
        if copied:
            return None
        plain = tuple(Column(c.name, c.type, True) for c in written)
        return Schema(plain, _valid_key(key, plain))
    before = {c.name: c for c in old.columns}
    columns = [_joined(c, before.get(c.name), copied, where) for c in written]
    if copied:
        names = {c.name for c in written}
        columns += [
            Column(c.name, c.type, True, c.sql_type) for c in old.columns if c.name not in names
        ]
    return Schema(tuple(columns), _valid_key(key or old.primary_key, columns))


def _joined(new: Column, old: Column | None, copied: bool, where: str) -> Column:
    if old is None:
        return Column(new.name, new.type, True, new.sql_type)  # the old rows lack it
    nullable = new.nullable or old.nullable  # the old rows stay beside the new
    sql_type = new.sql_type if new.sql_type == old.sql_type else ""
    type_ = new.type
    if copied and old.type != new.type:
        wider = _wider(old.type, new.type)
        if wider is None:
            raise PermanentError(
                f"{where}: column {new.name!r} holds {old.type} (its schema sidecar says so), "
                f"the written rows have it as {new.type}; a file holds one type per column: "
                f"write with mode overwrite, or cast the column in the pipeline's spec"
            )
        type_, sql_type = wider, ""
    return Column(new.name, type_, nullable, sql_type)


def _wider(a: str, b: str) -> str | None:
    """The type that holds every value of both, where one reads the other's
    JSON and CSV text exactly; None when none does."""
    if a in _WIDER and b in _WIDER:
        return max(a, b, key=_WIDER.index)
    if {a, b} <= INTEGERS | {"numeric", "real", "double"}:
        # A double's shortest digits read back exactly as a numeric.
        return "numeric" if {a, b} & (INTEGERS | {"numeric"}) else "double"
    return None


def _valid_key(key: Sequence[str], columns: Sequence[Column]) -> tuple[str, ...]:
    names = {c.name for c in columns}
    return tuple(key) if key and set(key) <= names and len(set(key)) == len(key) else ()


# ---------------------------------------------------------------- storage


async def read(storage: _Storage, ref: str) -> Schema | None:
    """The sidecar of the data file `ref` (which exists), or None: there is
    none, or it is stale (its size is another version's: logged)."""
    side = ref_of(ref)
    if not await storage.exists(side):
        return None
    where = storage.where(side)
    data = bytearray()
    async with aclosing(storage.chunks(side)) as chunks:
        async for lines in chunks:
            for line in lines:
                data += line
            if len(data) > MAX_BYTES:
                raise too_large(where)
    schema = parse(bytes(data), where)
    if schema.data_bytes is not None:
        size = await storage.size(ref)
        if size != schema.data_bytes:
            log.warning(
                "%s: ignored: it describes a file of %d bytes, %s has %d (a write cut between "
                "its two commits, or another tool rewrote the file); the types are inferred",
                where,
                schema.data_bytes,
                storage.where(ref),
                size,
            )
            return None
    return schema


async def staged(storage: _Storage, ref: str, schema: Schema, data: Path) -> Path:
    """A temporary file holding the sidecar of `ref`, whose new content is
    the file `data`, for storage.commit."""
    size = (await asyncio.to_thread(data.stat)).st_size
    temp = await storage.temp_file(ref_of(ref))
    body = document(Schema(schema.columns, schema.primary_key, size))
    await asyncio.to_thread(temp.write_bytes, body)
    return temp


def columns_of(schema: Schema, declared: dict[str, str]) -> list[Column]:
    """The stream's columns: the sidecar's, a type `config.columns` declares
    first (as the neutral type it names, nullability kept)."""
    return [
        Column(c.name, declared[c.name], c.nullable) if declared.get(c.name) else c
        for c in schema.columns
    ]


def disagreeing(schema: Schema, found: Sequence[str], what: str, data: str, side: str) -> None:
    """Raises PermanentError when the names the file holds (its header, or
    its records' fields: `what`) are not the sidecar's."""
    # A header names every column in order; records may leave a key out
    # (a json column's SQL NULL).
    header = what == "header"
    if list(found) == schema.names() if header else set(found) <= set(schema.names()):
        return
    raise PermanentError(
        f"{data}: its {what} ({', '.join(map(repr, found))[:300]}) does not match the columns "
        f"of its schema sidecar {side} ({', '.join(map(repr, schema.names()))[:300]}); the "
        f"file was changed by another tool: delete the sidecar to infer the types, or write "
        f"the file again"
    )


# ---------------------------------------------------------------- discover


async def jsonl_described(
    storage: _Storage, ref: str, source: _Source, declared: dict[str, str]
) -> tuple[list[Column], tuple[str, ...]] | None:
    """A JSON Lines file's columns and key from its sidecar, checked against
    its first records' fields; None without a current sidecar. A declared
    column the sidecar lacks is added, as inference adds it."""
    schema = await read(storage, ref)
    if schema is None:
        return None
    fields: dict[str, None] = {}
    async with aclosing(_head(jsonl_records(storage.chunks(ref), source))) as chunks:
        async for chunk in chunks:
            for _, record in chunk:
                fields.update(dict.fromkeys(record))
    disagreeing(schema, list(fields), "fields", source.where, storage.where(ref_of(ref)))
    names = set(schema.names())
    extra = [Column(n, t) for n, t in declared.items() if n not in names]
    return columns_of(schema, declared) + extra, schema.primary_key


async def csv_described(
    storage: _Storage,
    ref: str,
    source: _Source,
    declared: dict[str, str],
    options: files_csv.CsvOptions,
) -> tuple[list[Column], tuple[str, ...]] | None:
    """A CSV file's columns and key from its sidecar, checked against its
    header (a headerless file's: the names `options` gives it); None
    without a current sidecar."""
    schema = await read(storage, ref)
    if schema is None:
        return None
    first = await files_csv.first_record(
        files_csv.csv_records(storage.chunks(ref), options, source)
    )
    found = [] if first is None else files_csv.header_names(first, options, source)
    disagreeing(schema, found, "header", source.where, storage.where(ref_of(ref)))
    for name in declared.keys() - set(found):
        where = f"config.columns.{source.stream}.{name}"
        raise PermanentError(f"{where}: {source.where} has no such column")
    return columns_of(schema, declared), schema.primary_key
