"""Rows to bytes for the `file` provider's writers: JSON Lines through
orjson, a batch at a time, and CSV through per-column text converters.

The spellings are those of docs/data-types.md ("Values and spellings per
format"), read from setu_engine/values/spellings.py (as the SQL-rendered JSON
Lines of setu_engine/providers/postgres/json.py reads them), which
files_codec reads back: NaN and ±Infinity of double, real and
numeric as `NaN`, `Infinity`, `-Infinity` (JSON strings in JSON Lines);
±infinity of dates and timestamps as `infinity`, `-infinity`; numerics as
their exact digits; real as float4's shortest digits; bytes as base64; json
as the JSON value (JSON Lines) or its text (CSV). A real is the float4's
value exactly (as both paths decode it) and is printed with the float4's
shortest digits here. In JSON Lines a json
column's SQL NULL leaves its key out, so `null` there is JSON's null.

orjson writes a batch of rows as fast as PostgreSQL sends them; what it
cannot write itself (Decimal digits, bytes, the infinities) goes through
`default`, and what it would write wrongly (a NaN as null, a SQL NULL json
as null) is put right per row first, for the columns that need it only.
"""

from __future__ import annotations

import base64
import csv
import io
import math
from collections.abc import Callable, Sequence
from datetime import date, time
from decimal import Decimal
from typing import Any
from uuid import UUID

import orjson

from setu_engine.errors import ValueFault
from setu_engine.values import spellings
from setu_engine.values.special import JSON_NULL, Infinite, nonfinite_text, shortest_real
from setu_engine.values.types import Column, Row

Encoder = Callable[[Sequence[Row]], bytes]

_OPTIONS = orjson.OPT_APPEND_NEWLINE


def _default(value: Any) -> Any:
    """What orjson cannot write itself."""
    if isinstance(value, Decimal):
        return orjson.Fragment(str(value)) if value.is_finite() else _decimal_text(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Infinite):
        return value.text
    if value is JSON_NULL:
        return None
    if isinstance(value, UUID):  # asyncpg's own UUID class, which orjson does not know
        return str(value)
    raise TypeError(f"a {type(value).__name__} has no JSON Lines form")


def _decimal_text(value: Decimal) -> str:
    if value.is_nan():
        return spellings.NAN
    return spellings.INFINITY if value > 0 else spellings.MINUS_INFINITY


def _spelled_float(value: Any) -> Any:
    if value is not None and not math.isfinite(value):
        return nonfinite_text(value)
    return value


def jsonl_encoder(columns: Sequence[Column]) -> Encoder:
    """Encodes a batch of rows as JSON Lines (one object per row)."""
    names = [c.name for c in columns]
    reals = [c.name for c in columns if c.type == "real"]
    doubles = [c.name for c in columns if c.type == "double"]
    jsons = [c.name for c in columns if c.type == "json"]
    dumps = orjson.dumps

    def fix(record: dict[str, Any]) -> None:
        for name in reals:
            value = record[name]
            if value is not None:
                record[name] = _real_json(value)
        for name in doubles:
            value = record[name]
            if value is not None and (value != value or value in _INFINITE):
                record[name] = nonfinite_text(value)
        for name in jsons:
            if record[name] is None:  # SQL NULL: left out; `null` is JSON's
                del record[name]

    fixing = bool(reals or doubles or jsons)

    def encode(rows: Sequence[Row]) -> bytes:
        # Appended as they come: each bytes orjson returns keeps the
        # capacity it was allocated with (kilobytes), so holding a batch of
        # them costs hundreds of MiB; freed at once, its memory is reused.
        out = bytearray()
        for number, row in enumerate(rows, 1):
            record = dict(zip(names, row, strict=True))
            if fixing:
                fix(record)
            try:
                out += dumps(record, default=_default, option=_OPTIONS)
            except orjson.JSONEncodeError as exc:
                raise _jsonl_fault(columns, row, number, exc) from exc
        return bytes(out)

    return encode


_INFINITE = (math.inf, -math.inf)


def _real_json(value: float) -> float | str:
    return shortest_real(value) if math.isfinite(value) else nonfinite_text(value)


def _jsonl_fault(columns: Sequence[Column], row: Row, number: int, exc: Exception) -> ValueFault:
    """Names the value orjson refused (an integer past 64 bits inside a
    json value, a string that is not UTF-8)."""
    for column, value in zip(columns, row, strict=True):
        try:
            orjson.dumps(value, default=_default)
        except orjson.JSONEncodeError as refused:
            return ValueFault(
                f"no JSON form: {refused}", column=column.name, value=value, row=number
            )
    return ValueFault(f"no JSON form: {exc}", column=columns[0].name, value=row, row=number)


# ---------------------------------------------------------------- CSV

TextOf = Callable[[Any], str]


def _float_text(value: float) -> str:
    return repr(value) if math.isfinite(value) else nonfinite_text(value)


def _real_text(value: float) -> str:
    return repr(shortest_real(value)) if math.isfinite(value) else nonfinite_text(value)


def _numeric_text(value: Decimal) -> str:
    return str(value) if value.is_finite() else _decimal_text(value)


def _temporal_text(value: date | time | Infinite) -> str:
    return value.text if isinstance(value, Infinite) else value.isoformat()


def _json_text(value: Any) -> str:
    if value is JSON_NULL:
        return spellings.NULL
    return orjson.dumps(value, default=_default).decode()


_TEXT_OF: dict[str, TextOf] = {
    "boolean": lambda v: "true" if v else "false",
    "smallint": str,
    "integer": str,
    "bigint": str,
    "real": _real_text,
    "double": _float_text,
    "numeric": _numeric_text,
    "text": str,
    "bytes": lambda v: base64.b64encode(v).decode("ascii"),
    "date": _temporal_text,
    "time": _temporal_text,
    "timestamp": _temporal_text,
    "timestamptz": _temporal_text,
    "uuid": str,
    "json": _json_text,
}


def csv_encoder(columns: Sequence[Column], delimiter: str) -> Encoder:
    """Encodes a batch of rows as CSV lines (no header)."""
    converters = [_TEXT_OF.get(c.type, str) for c in columns]

    def fields(row: Row, number: int) -> list[str]:
        try:
            return ["" if v is None else f(v) for f, v in zip(converters, row, strict=True)]
        except (TypeError, ValueError, AttributeError, orjson.JSONEncodeError) as exc:
            raise _csv_fault(columns, converters, row, number, exc) from exc

    def encode(rows: Sequence[Row]) -> bytes:
        buffer = io.StringIO()
        out = csv.writer(buffer, delimiter=delimiter, lineterminator="\n")
        out.writerows(fields(row, number) for number, row in enumerate(rows, 1))
        return buffer.getvalue().encode("utf-8")

    return encode


def _csv_fault(
    columns: Sequence[Column], converters: list[TextOf], row: Row, number: int, exc: Exception
) -> ValueFault:
    for column, convert, value in zip(columns, converters, row, strict=True):
        if value is None:
            continue
        try:
            convert(value)
        except Exception as refused:
            return ValueFault(
                f"no {column.type} text form: {refused}",
                column=column.name,
                value=value,
                row=number,
            )
    return ValueFault(f"no CSV form: {exc}", column=columns[0].name, value=row, row=number)


def csv_header(columns: Sequence[Column], delimiter: str) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer, delimiter=delimiter, lineterminator="\n").writerow(c.name for c in columns)
    return buffer.getvalue().encode("utf-8")


LineEncoder = Callable[[Sequence[Row]], list[bytes]]


def line_encoder(columns: Sequence[Column], fmt: str, delimiter: str = ",") -> LineEncoder:
    """Encodes a batch as one line per row, each with its terminator (what
    a file upsert spills: merge.py), in the bytes the batch encoder
    writes. A bad value names its row in the batch, as the batch encoder's."""
    if fmt == "csv":
        return _csv_lines(columns, delimiter)
    encode = jsonl_encoder(columns)

    def lines(rows: Sequence[Row]) -> list[bytes]:
        # A JSON line holds no raw newline; splitting copies each line into
        # a bytes of its own size (orjson's own keep their capacity).
        return [line + b"\n" for line in encode(rows).split(b"\n")[:-1]]

    return lines


def _csv_lines(columns: Sequence[Column], delimiter: str) -> LineEncoder:
    encode = csv_encoder(columns, delimiter)

    def lines(rows: Sequence[Row]) -> list[bytes]:
        out = []
        for number, row in enumerate(rows):
            try:
                out.append(encode((row,)))  # a quoted field may hold a newline
            except ValueFault as fault:
                raise fault.located(None, number) from fault
        return out

    return lines
