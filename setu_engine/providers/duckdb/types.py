"""The `duckdb` provider's types and values, both ways: the DuckDB type a
column lands as, the Arrow batch a write ingests, the neutral type of a
DuckDB column, and the Python value a read gives back.

Pure conversion, no connection: the connector asks for a table's DDL, an
Arrow table per batch and a reader per stream.

Decisions (docs/data-types.md, "DuckDB"):
- numeric(p,s) with p ≤ 38 lands as DECIMAL(p,s); a wider or unconstrained
  numeric as VARCHAR holding the exact decimal text, the column's comment
  saying so (NUMERIC_COMMENT), so a read gives numeric back; never a DOUBLE.
- ±infinity of a date or timestamp is stored as DuckDB's own infinity
  (Arrow's largest and smallest values, which DuckDB takes as such) and read
  back as the engine's INFINITY / MINUS_INFINITY.
- json lands as JSON (the extension is built into the wheel, loaded
  without autoloading); a whole-value JSON null as the text `null`.
- an array (text holding PostgreSQL's array literal, its sql_type `x[]`)
  lands as a LIST of its element type (arrays.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any
from uuid import UUID

import pyarrow as pa  # type: ignore[import-untyped]

from setu_engine.errors import ValueFault
from setu_engine.providers.duckdb import arrays
from setu_engine.values import sqltypes
from setu_engine.values.special import INFINITY, JSON_NULL, MINUS_INFINITY, Infinite
from setu_engine.values.types import Batch, Column, Row

# The widest DECIMAL DuckDB has.
MAX_PRECISION = 38
# A VARCHAR column holding a numeric's exact text says so in its comment.
NUMERIC_COMMENT = "setu: numeric (exact decimal text)"

# Each neutral type's DuckDB type when nothing more is known.
DECLARED: dict[str, str] = {
    "boolean": "BOOLEAN",
    "smallint": "SMALLINT",
    "integer": "INTEGER",
    "bigint": "BIGINT",
    "real": "FLOAT",
    "double": "DOUBLE",
    "numeric": "VARCHAR",
    "text": "VARCHAR",
    "bytes": "BLOB",
    "date": "DATE",
    "time": "TIME",
    "timestamp": "TIMESTAMP",
    "timestamptz": "TIMESTAMPTZ",
    "uuid": "UUID",
    "json": "JSON",
}

# Arrow's int32 / int64 extremes are DuckDB's ±infinity of a DATE / TIMESTAMP.
_DATE_INF = 2**31 - 1
_TS_INF = 2**63 - 1
_EPOCH_DAY = date(1970, 1, 1).toordinal()
_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)


def declared(column: Column) -> str:
    """The DuckDB type `column` lands as (built from known names and
    integers only: a column's sql_type is tenant text, never spliced)."""
    return _landing(column).ddl


def arrow_type(column: Column) -> pa.DataType:
    """The Arrow type a batch holds `column`'s values in."""
    return _landing(column).arrow


def is_list(column: Column) -> bool:
    """An array column (a PostgreSQL array's text), which lands as a LIST."""
    parsed = _sql_type(column)
    return parsed is not None and parsed.array


def is_exact_text(column: Column) -> bool:
    """A numeric stored as its exact text (NUMERIC_COMMENT)."""
    return column.type == "numeric" and _landing(column).arrow == pa.string()


@dataclass(frozen=True)
class _Landing:
    ddl: str
    arrow: pa.DataType
    # Each value into what Arrow takes (raises on one that does not fit).
    prepare: Callable[[Any], Any] | None = None
    # True when Arrow takes a batch's values as they are, so the per-value
    # `prepare` is skipped (the common case: no infinity, the right types).
    takes: Callable[[list[Any]], bool] | None = None


def _landing(column: Column) -> _Landing:
    parsed = _sql_type(column)
    if parsed is not None and parsed.array:
        element = parsed.base
        neutral = sqltypes.BASES[element]
        inner = _landing(Column("element", neutral, True, _element_sql(parsed)))
        return _Landing(f"{inner.ddl}[]", pa.list_(inner.arrow), arrays.parser(neutral, inner))
    if column.type == "numeric":
        if parsed is not None and parsed.args and parsed.args[0] <= MAX_PRECISION:
            precision, scale = parsed.args[0], (parsed.args[1] if len(parsed.args) > 1 else 0)
            if scale >= 0:
                return _Landing(f"DECIMAL({precision},{scale})", pa.decimal128(precision, scale))
        return _Landing("VARCHAR", pa.string(), _exact_text)
    return _BY_TYPE[column.type]


def _sql_type(column: Column) -> sqltypes.SqlType | None:
    if not column.sql_type:
        return None
    try:
        return sqltypes.parse(column.sql_type)
    except ValueError:
        return None


def _element_sql(parsed: sqltypes.SqlType) -> str:
    return sqltypes.SqlType(parsed.base, parsed.args).render()


def _exact_text(v: Any) -> str:
    if not isinstance(v, Decimal | int):
        raise TypeError("not a decimal")
    return str(v)


def _date_days(v: Any) -> int:
    if isinstance(v, Infinite):
        return _DATE_INF if v.sign > 0 else -_DATE_INF
    if isinstance(v, datetime) or not isinstance(v, date):
        raise TypeError("not a date")
    return v.toordinal() - _EPOCH_DAY


def _micros(v: Any) -> int:
    if isinstance(v, Infinite):
        return _TS_INF if v.sign > 0 else -_TS_INF
    if not isinstance(v, datetime) or v.utcoffset() is not None:
        raise TypeError("not a naive datetime")
    return (v - _EPOCH) // _MICROSECOND


def _micros_tz(v: Any) -> int:
    if isinstance(v, Infinite):
        return _TS_INF if v.sign > 0 else -_TS_INF
    if not isinstance(v, datetime) or v.utcoffset() is None:
        raise TypeError("a timestamptz needs an aware datetime")
    return (v - _EPOCH_UTC) // _MICROSECOND


_MICROSECOND = datetime(1970, 1, 1, 0, 0, 0, 1) - _EPOCH


def _uuid(v: Any) -> str:
    if not isinstance(v, UUID):
        raise TypeError("not a UUID")
    return str(v)


def _json(v: Any) -> str:
    return "null" if v is JSON_NULL else _dump_json(v)


_dump_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def _dates(values: list[Any]) -> bool:
    # Arrow would cut a datetime down to its date: only dates as they are.
    return all(v is None or type(v) is date for v in values)


def _naive(values: list[Any]) -> bool:
    return all(v is None or (type(v) is datetime and v.tzinfo is None) for v in values)


def _aware(values: list[Any]) -> bool:
    # Arrow would take a naive datetime as UTC: only aware ones as they are.
    return all(v is None or (type(v) is datetime and v.tzinfo is not None) for v in values)


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise TypeError("not a boolean")
    return v


_BY_TYPE: dict[str, _Landing] = {
    "boolean": _Landing("BOOLEAN", pa.bool_(), _bool),
    "smallint": _Landing("SMALLINT", pa.int16()),
    "integer": _Landing("INTEGER", pa.int32()),
    "bigint": _Landing("BIGINT", pa.int64()),
    "real": _Landing("FLOAT", pa.float32()),
    "double": _Landing("DOUBLE", pa.float64()),
    # Arrow refuses a non-string and a lone surrogate itself.
    "text": _Landing("VARCHAR", pa.string()),
    "bytes": _Landing("BLOB", pa.binary()),
    "date": _Landing("DATE", pa.date32(), _date_days, _dates),
    "time": _Landing("TIME", pa.time64("us")),
    "timestamp": _Landing("TIMESTAMP", pa.timestamp("us"), _micros, _naive),
    "timestamptz": _Landing("TIMESTAMPTZ", pa.timestamp("us", tz="UTC"), _micros_tz, _aware),
    # Arrow has no UUID or JSON DuckDB takes: text, cast by the INSERT.
    "uuid": _Landing("UUID", pa.string(), _uuid),
    "json": _Landing("JSON", pa.string(), _json),
}
# Prepared values already in Arrow's storage type (days, microseconds).
_STORAGE = {
    "date": pa.int32(),
    "timestamp": pa.int64(),
    "timestamptz": pa.int64(),
}


def arrow_table(table: str, columns: Sequence[Column], batch: Batch) -> pa.Table:
    """One batch as an Arrow table of the columns' landing types; a value
    that does not fit raises ValueFault naming its column and row (1-based
    in the batch)."""
    arrays_: list[pa.Array] = []
    for at, column in enumerate(columns):
        landing = _landing(column)
        values = [row[at] for row in batch]
        try:
            if landing.takes is not None and landing.takes(values):
                arrays_.append(pa.array(values, landing.arrow))
                continue
            if landing.prepare is not None:
                prepare = landing.prepare
                values = [None if v is None else prepare(v) for v in values]
            storage = _STORAGE.get(column.type)
            if storage is not None:
                arrays_.append(pa.array(values, storage).cast(landing.arrow))
            else:
                arrays_.append(pa.array(values, landing.arrow))
        except (ValueError, TypeError, ArithmeticError, pa.ArrowException) as exc:
            raise _fault(table, column, landing, batch, at, exc) from exc
    return pa.Table.from_arrays(arrays_, names=[f"c{i}" for i in range(len(columns))])


def _fault(
    table: str, column: Column, landing: _Landing, batch: Batch, at: int, exc: BaseException
) -> ValueFault:
    """The first row whose value is at fault (the batch failed as a whole)."""
    for number, row in enumerate(batch, 1):
        value = row[at]
        if value is None:
            continue
        try:
            prepared = value if landing.prepare is None else landing.prepare(value)
            pa.array([prepared], _STORAGE.get(column.type) or landing.arrow)
        except Exception as bad:
            return ValueFault(
                f"duckdb table {table!r}: cannot write it as {landing.ddl} "
                f"({bad or type(bad).__name__})",
                column=column.name,
                value=value,
                row=number,
            )
    return ValueFault(
        f"duckdb table {table!r}: cannot write it as {landing.ddl} ({exc})",
        column=column.name,
        value=None,
    )


# --- reading -------------------------------------------------------------


@dataclass(frozen=True)
class Found:
    """A DuckDB column as a stream offers it."""

    column: Column
    # The SELECT expression of a read (`q` is the quoted column name).
    select: str
    convert: Callable[[Any], Any] | None = None
    # Temporal columns read an infinity flag beside the value.
    infinite: bool = False


_BASE_NEUTRAL = {
    "BOOLEAN": "boolean",
    "TINYINT": "smallint",
    "SMALLINT": "smallint",
    "UTINYINT": "smallint",
    "INTEGER": "integer",
    "USMALLINT": "integer",
    "BIGINT": "bigint",
    "UINTEGER": "bigint",
    "FLOAT": "real",
    "DOUBLE": "double",
    "VARCHAR": "text",
    "BLOB": "bytes",
    "DATE": "date",
    "TIME": "time",
    "TIMESTAMP": "timestamp",
    "TIMESTAMP_S": "timestamp",
    "TIMESTAMP_MS": "timestamp",
    "TIMESTAMP_NS": "timestamp",
    "TIMESTAMP WITH TIME ZONE": "timestamptz",
    "UUID": "uuid",
    "JSON": "json",
}
# Integers wider than bigint, read as exact numerics.
_WIDE_INTEGERS = {"UBIGINT": 20, "HUGEINT": 39, "UHUGEINT": 39}
# The sql_type a DuckDB type keeps where the neutral type says less.
_KEPT = {"TINYINT": "smallint", "UTINYINT": "smallint"}


def found(name: str, data_type: str, nullable: bool, comment: str | None, q: str) -> Found:
    """A DuckDB column (its information_schema data_type) as a neutral
    column and how a read selects and converts it."""
    kind = data_type.strip().upper()
    if kind.startswith("DECIMAL("):
        precision, scale = (int(p) for p in kind[8:-1].split(","))
        sql = sqltypes.SqlType("numeric", (precision, scale)).render()
        return Found(Column(name, "numeric", nullable, sql), q)
    if kind in _WIDE_INTEGERS:
        sql = sqltypes.SqlType("numeric", (_WIDE_INTEGERS[kind], 0)).render()
        return Found(Column(name, "numeric", nullable, sql), q, Decimal)
    if kind == "VARCHAR" and comment == NUMERIC_COMMENT:
        return Found(Column(name, "numeric", nullable), q, _read_decimal)
    if kind.endswith("[]"):
        element = _array_base(kind[:-2])
        if element is not None:
            sql = sqltypes.SqlType(element.base, element.args, array=True).render()
            element_type = sqltypes.BASES[element.base]
            return Found(Column(name, "text", nullable, sql), q, arrays.renderer(element_type))
    neutral = _BASE_NEUTRAL.get(kind)
    if neutral is None:
        # STRUCT, MAP, UNION, nested LISTs: their JSON; anything else as text.
        if kind.startswith(("STRUCT", "MAP", "UNION")) or kind.endswith("]"):
            return Found(Column(name, "json", nullable), f"to_json({q})", _read_json)
        return Found(Column(name, "text", nullable), f"CAST({q} AS VARCHAR)")
    convert = _READERS.get(neutral)
    infinite = neutral in ("date", "timestamp", "timestamptz")
    return Found(Column(name, neutral, nullable, _KEPT.get(kind, "")), q, convert, infinite)


# DuckDB element types a LIST keeps as a PostgreSQL array of the same.
_ARRAY_BASES = {
    "BOOLEAN": "boolean",
    "SMALLINT": "smallint",
    "INTEGER": "integer",
    "BIGINT": "bigint",
    "FLOAT": "real",
    "DOUBLE": "double precision",
    "VARCHAR": "text",
    "DATE": "date",
    "TIME": "time without time zone",
    "TIMESTAMP": "timestamp without time zone",
    "TIMESTAMP WITH TIME ZONE": "timestamp with time zone",
    "UUID": "uuid",
}


def _array_base(kind: str) -> sqltypes.SqlType | None:
    if kind.startswith("DECIMAL("):
        precision, scale = (int(p) for p in kind[8:-1].split(","))
        return sqltypes.SqlType("numeric", (precision, scale))
    base = _ARRAY_BASES.get(kind)
    return None if base is None else sqltypes.SqlType(base)


def _read_decimal(v: Any) -> Decimal:
    try:
        return Decimal(v)
    except InvalidOperation as exc:
        raise ValueError("not a decimal") from exc


def _read_json(v: Any) -> Any:
    value = json.loads(v)
    return JSON_NULL if value is None else value


def _read_timestamptz(v: Any) -> datetime:
    return v.astimezone(UTC) if isinstance(v, datetime) else v


_READERS: dict[str, Callable[[Any], Any]] = {
    "json": _read_json,
    "timestamptz": _read_timestamptz,
}


def infinity_flag(q: str) -> str:
    """1, -1 or NULL beside a temporal value: Python clamps DuckDB's
    infinities to date.max / min, which are real dates too."""
    return f"CASE WHEN isinf({q}) THEN (CASE WHEN {q} > 'epoch' THEN 1 ELSE -1 END) END"


def row_reader(table: str, found_: Sequence[Found]) -> Callable[[Sequence[Any]], Row]:
    """A row as DuckDB returns it (each temporal value followed by its
    infinity flag) in neutral values."""
    plan = [(f.convert, f.infinite) for f in found_]
    columns = [f.column for f in found_]

    def convert(raw: Sequence[Any]) -> Row:
        out: list[Any] = []
        at = 0
        for (fn, infinite), column in zip(plan, columns, strict=True):
            value = raw[at]
            at += 1
            if infinite:
                flag = raw[at]
                at += 1
                if flag is not None:
                    out.append(INFINITY if flag > 0 else MINUS_INFINITY)
                    continue
            if value is not None and fn is not None:
                try:
                    value = fn(value)
                # RecursionError: a JSON value nested past the decoder's depth
                # (DuckDB stores one as deep as it is given).
                except (ValueError, TypeError, RecursionError) as exc:
                    raise ValueFault(
                        f"duckdb table {table!r}: cannot read it as {column.type} "
                        f"({str(exc)[:200]})",
                        column=column.name,
                        value=value,
                    ) from exc
            out.append(value)
        return tuple(out)

    return convert
