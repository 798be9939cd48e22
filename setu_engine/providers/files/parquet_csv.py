"""CSV in the hand-off dialect (setu_engine/movement/transfer.py, CsvSource)
into the Arrow tables a Parquet file is written from, parsed by Arrow's C++
reader with each column's Parquet type: a PostgreSQL → Parquet run whose
values never become Python objects.

Only the columns whose text Arrow reads exactly as the rows path writes
them take this path (`takes`): booleans, integers, doubles, text (not an
array), dates, timestamps, and numerics with a declared precision (up to
38) and scale. Anything else (a bare numeric, bytes, uuid, json, time,
real, an array) takes the rows path. A value Arrow refuses (a date's
±infinity, a numeric's NaN: what the rows path refuses too) is the
ValueFault naming its column and row (1-based in the file).
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.csv as pa_csv  # type: ignore[import-untyped]

from setu_engine.errors import ValueFault
from setu_engine.values.types import Column

_TYPES = frozenset(
    {"boolean", "smallint", "integer", "bigint", "double", "text", "date", "timestamp"}
)
_NAIVE = pa.timestamp("us")
_UTC = pa.timestamp("us", tz="UTC")
# A field may hold a newline only inside quotes: a batch with no quote at
# all is read with the faster parser that splits at every newline.
_QUOTED = pa_csv.ParseOptions(newlines_in_values=True)
_PLAIN = pa_csv.ParseOptions(newlines_in_values=False)


def takes(schema: pa.Schema, columns: Sequence[Column]) -> bool:
    """Whether every column of a file of this schema lands through this reader."""
    for field, column in zip(schema, columns, strict=True):
        type_ = field.type
        if column.type == "numeric":
            if not pa.types.is_decimal128(type_) or not column.sql_type:
                return False  # a bare numeric keeps its own rounding (parquet.py)
        elif column.type == "timestamptz":
            continue  # its UTC wall time, viewed as UTC (_aware)
        elif column.type not in _TYPES or pa.types.is_list(type_):
            return False
    return True


def _read(data: bytes, names: list[str], types: dict[str, pa.DataType]) -> pa.Table:
    return pa_csv.read_csv(
        io.BytesIO(data),
        read_options=pa_csv.ReadOptions(column_names=names),
        parse_options=_QUOTED if b'"' in data else _PLAIN,
        convert_options=pa_csv.ConvertOptions(
            column_types=types,
            true_values=["t"],
            false_values=["f"],
            null_values=[""],
            strings_can_be_null=True,
            # "" is an empty text; only an unquoted empty field is NULL.
            quoted_strings_can_be_null=False,
        ),
    )


def table_of(
    data: bytes, schema: pa.Schema, columns: Sequence[Column], where: str, before: int
) -> pa.Table:
    """One batch of CSV records as a table of the file's schema; `before`
    rows were written ahead of it (for a fault's row)."""
    names = [f"c{i}" for i in range(len(columns))]
    types = {
        n: _NAIVE if c.type == "timestamptz" else f.type
        for n, c, f in zip(names, columns, schema, strict=True)
    }
    try:
        read = _read(data, names, types)
    except pa.ArrowInvalid as exc:
        raise _located(data, names, types, columns, where, before, exc) from None
    arrays: list[pa.ChunkedArray] = []
    for i, column in enumerate(columns):
        values = read.column(i)
        if column.type == "timestamptz":
            # The same microseconds: a view, no value converted.
            values = pa.chunked_array([c.view(_UTC) for c in values.chunks], _UTC)
        if not column.nullable and values.null_count:
            row = next(r for r, v in enumerate(values.is_null().to_pylist()) if v)
            raise ValueFault(
                "NULL in a column declared NOT NULL",
                column=column.name,
                value=None,
                row=before + row + 1,
            )
        arrays.append(values)
    return pa.Table.from_arrays(arrays, schema=schema)


def _located(
    data: bytes,
    names: list[str],
    types: dict[str, pa.DataType],
    columns: Sequence[Column],
    where: str,
    before: int,
    exc: Exception,
) -> ValueFault:
    """The first value Arrow's reader refuses, in the first column holding one."""
    try:
        text = _read(data, names, {n: pa.string() for n in names})
    except pa.ArrowInvalid:
        return ValueFault(
            f"{where}: a batch of the source's CSV does not parse ({str(exc)[:200]})",
            column=None,
            value=None,
        )
    for name, column in zip(names, columns, strict=True):
        if types[name] == pa.string():
            continue
        for number, value in enumerate(text.column(name).to_pylist(), 1):
            if value is not None and not _fits(value, types[name]):
                return ValueFault(
                    f"cannot be written to Parquet as {types[name]}",
                    column=column.name,
                    value=value,
                    row=before + number,
                )
    return ValueFault(f"{where}: a value does not fit its column ({exc})", column=None, value=None)


def _fits(value: str, target: pa.DataType) -> bool:
    field = b'"' + value.encode().replace(b'"', b'""') + b'"\n'
    try:
        _read(field, ["v"], {"v": target})
    except pa.ArrowInvalid:
        return False
    return True
