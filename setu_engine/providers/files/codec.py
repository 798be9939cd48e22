"""Values and records of the `file` provider: a value's text and JSON forms
(read and written), type inference from sampled JSON values, and the
parsing of JSON Lines records into typed rows (CSV's records and inference
are in csv.py, this package).

Separate from connector.py because none of it knows where a file lives or how a
connector drives it: it turns lines into rows and values into text, and can
be read (and tested) on its own.
"""

from __future__ import annotations

import base64
import json
import math
import re
import uuid
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar

from setu_engine.errors import ProviderError, ValueFault
from setu_engine.values.special import INFINITIES, JSON_NULL, NONFINITE_TEXTS
from setu_engine.values.types import INTEGERS, Column, Row

SAMPLE_ROWS = 1000

# ---------------------------------------------------------------- values


_INT = re.compile(r"^[+-]?\d+$", re.ASCII)
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


def _or_infinite(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A date or timestamp parser that also reads `infinity`/`-infinity`."""

    def read(text: str) -> Any:
        infinite = INFINITIES.get(text.strip().lower())
        return parse(text) if infinite is None else infinite

    return read


_TEXT_PARSERS: dict[str, Callable[[str], Any]] = {
    "bytes": lambda text: base64.b64decode(text, validate=True),
    "date": _or_infinite(date.fromisoformat),
    "time": _time,
    "timestamp": _or_infinite(_timestamp),
    "timestamptz": _or_infinite(_timestamptz),
    "uuid": uuid.UUID,
    "json": lambda text: _json_or_null(json.loads(text)),
}


def _json_or_null(value: Any) -> Any:
    # A field `null` is JSON's null; SQL NULL is the empty field.
    return JSON_NULL if value is None else value


def from_json(value: Any, type_: str) -> Any:
    """A value's neutral form from a decoded JSON value (floats as Decimal).
    In a json column `null` is JSON's null; SQL NULL is the key left out
    (MISSING)."""
    if value is MISSING:
        return None
    if value is None:
        return JSON_NULL if type_ == "json" else None
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


class _Missing:
    """A JSON Lines record without the column's key."""


MISSING: Any = _Missing()


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


def infer_json(values: Sequence[Any]) -> str:
    """The type of a JSON Lines field from its non-null sampled values."""
    kinds = {_json_kind(v) for v in values}
    if not kinds:
        return "text"
    if kinds == {"int"}:
        fits = all(-(2**63) <= v < 2**63 for v in values)
        return "bigint" if fits else "numeric"
    if kinds <= {"int", "float"}:
        # A double only when every value is one exactly: a number whose digits
        # a double would change (12345678901234567890.123456789) is numeric.
        return "double" if all(_exact_double(v) for v in values) else "numeric"
    if len(kinds) == 1:
        return kinds.pop()
    return "text"


def _exact_double(value: Any) -> bool:
    """Whether a sampled JSON number (an int, or a Decimal as parsed) reads
    back from a double as the same number; NaN and infinities do."""
    if isinstance(value, str):
        return True  # "NaN", "Infinity": a double holds them
    try:
        return bool(Decimal(repr(float(value))) == value)
    except OverflowError:
        return False


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "int"
    if isinstance(value, Decimal | float) or (isinstance(value, str) and value in NONFINITE_TEXTS):
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
    # A bad value is permanent: another attempt reads the same file.
    return ValueFault(
        f"{source.where}: line {line}: not a valid {column.type} ({exc}); the type was "
        f"inferred from the first {SAMPLE_ROWS} rows, declare it in "
        f'config.columns.{source.stream}.{column.name} (e.g. "text")',
        column=column.name,
        value=value,
        stream=source.stream,
    )


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
                    tuple(
                        _jsonl_cell(record.get(c.name, MISSING), c, source, line) for c in columns
                    )
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
