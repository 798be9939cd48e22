"""CSV in the hand-off dialect (setu_engine/movement/transfer.py, CsvSource)
into the Arrow table a write ingests, parsed by Arrow's C++ reader with
each column's landing type (types.py): a PostgreSQL → DuckDB run whose
values never become Python objects.

The typed read takes almost every batch. One it refuses (a date's or a
timestamp's ±infinity, which Arrow's parser has no word for, or a value
that does not fit) is read again as text and converted column by column:
infinities become DuckDB's own, and a value that still does not fit is the
ValueFault the rows path raises for it, naming column and row.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.csv as pa_csv  # type: ignore[import-untyped]

from setu_engine.errors import ValueFault
from setu_engine.providers.duckdb import types as duck_types
from setu_engine.values.types import Column

# The neutral types the CSV path lands; an array (a LIST) takes the rows path.
_TEMPORAL = ("date", "timestamp", "timestamptz")
# Arrow's extremes, DuckDB's ±infinity of a DATE (int32) and a TIMESTAMP (int64).
_INFINITE = {"date": (pa.int32(), 2**31 - 1), "timestamp": (pa.int64(), 2**63 - 1)}
_INFINITE["timestamptz"] = _INFINITE["timestamp"]

# A field may hold a newline only inside quotes; a batch with no quote at
# all (common: no empty text, no comma or quote in a value) is read with
# the faster parser that splits at every newline (0.27 s → 0.17 s for
# 500,000 payments rows).
_QUOTED = pa_csv.ParseOptions(newlines_in_values=True)
_PLAIN = pa_csv.ParseOptions(newlines_in_values=False)


def takes(columns: Sequence[Column]) -> bool:
    """Whether every column lands through this reader (no LIST column)."""
    return all(not duck_types.is_list(c) for c in columns)


def _read_type(column: Column) -> pa.DataType:
    # bytes come as hex text, unhexed by the INSERT (pick); a timestamptz
    # as its UTC wall time, made aware by _aware.
    if column.type == "bytes":
        return pa.string()
    if column.type == "timestamptz":
        return _NAIVE
    return duck_types.arrow_type(column)


_NAIVE = pa.timestamp("us")
_UTC = pa.timestamp("us", tz="UTC")


def _aware(table: pa.Table, columns: Sequence[Column]) -> pa.Table:
    """Each timestamptz column's UTC wall times as instants in UTC: the same
    microseconds, so a view of them (no value converted)."""
    for i, column in enumerate(columns):
        if column.type == "timestamptz":
            read = table.column(i)
            aware = pa.chunked_array([c.view(_UTC) for c in read.chunks], _UTC)
            table = table.set_column(i, table.field(i).name, aware)
    return table


def pick(column: Column, name: str) -> str:
    """The INSERT's expression for the read column `name`."""
    return f"unhex({name})" if column.type == "bytes" else name


def _convert(types: dict[str, pa.DataType]) -> pa_csv.ConvertOptions:
    return pa_csv.ConvertOptions(
        column_types=types,
        true_values=["t"],
        false_values=["f"],
        null_values=[""],
        strings_can_be_null=True,
        # "" is an empty text; only an unquoted empty field is NULL.
        quoted_strings_can_be_null=False,
        include_columns=list(types),
    )


def _read(data: bytes, names: list[str], types: dict[str, pa.DataType]) -> pa.Table:
    return pa_csv.read_csv(
        io.BytesIO(data),
        read_options=pa_csv.ReadOptions(column_names=names),
        parse_options=_QUOTED if b'"' in data else _PLAIN,
        convert_options=_convert(types),
    )


def arrow_table(table: str, columns: Sequence[Column], data: bytes) -> pa.Table:
    """One batch of CSV records as an Arrow table of the columns' landing
    types (named c0, c1, …); a value that does not fit raises ValueFault
    naming its column and row (1-based in the batch)."""
    names = [f"c{i}" for i in range(len(columns))]
    types = {n: _read_type(c) for n, c in zip(names, columns, strict=True)}
    try:
        return _aware(_read(data, names, types), columns)
    except pa.ArrowInvalid:
        pass  # an infinity, or a value that does not fit
    # Again, dates and timestamps as text: their infinities are converted
    # here, and Arrow's parser refuses a year outside 1-9999 as Python does.
    relaxed = {
        n: pa.string() if c.type in _TEMPORAL else types[n]
        for n, c in zip(names, columns, strict=True)
    }
    try:
        raw = _read(data, names, relaxed)
    except pa.ArrowInvalid:
        raise _located(table, columns, data, names, types) from None
    converted = [
        _temporal(table, column, raw.column(i).combine_chunks(), types[names[i]])
        if column.type in _TEMPORAL
        else raw.column(i).combine_chunks()
        for i, column in enumerate(columns)
    ]
    return _aware(pa.Table.from_arrays(converted, names=names), columns)


def _temporal(table: str, column: Column, text: pa.Array, target: pa.DataType) -> pa.Array:
    """A date or timestamp column read as text: ±infinity as DuckDB's own."""
    # Imported here, on the slow path only: pyarrow.compute's import cost a
    # 200,000-row run that never needs it 0.15 s of its 0.67 s.
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    plus, minus = pc.equal(text, "infinity"), pc.equal(text, "-infinity")
    finite = pc.if_else(pc.or_(plus, minus), pa.scalar(None, pa.string()), text)
    try:
        values = pc.cast(finite, target)
    except pa.ArrowInvalid:
        for number, value in enumerate(finite.to_pylist(), 1):
            if value is not None and not _fits(value, target):
                raise _fault(table, column, value, number) from None
        raise
    storage, extreme = _INFINITE[column.type]
    ints = pc.cast(values, storage)
    ints = pc.if_else(plus, pa.scalar(extreme, storage), ints)
    ints = pc.if_else(minus, pa.scalar(-extreme, storage), ints)
    return ints.cast(target)


def _located(
    table: str,
    columns: Sequence[Column],
    data: bytes,
    names: list[str],
    types: dict[str, pa.DataType],
) -> ValueFault:
    """The first value Arrow's reader refuses, in the first column that
    holds one (a batch that failed as a whole)."""
    try:
        text = _read(data, names, {n: pa.string() for n in names})
    except pa.ArrowInvalid as exc:
        # Not text at all: a record of another width, or bytes that are not
        # UTF-8 (a SQL_ASCII database's, or a hostile server's).
        return ValueFault(
            f"duckdb table {table!r}: a batch of the source's CSV does not parse "
            f"({str(exc)[:200]})",
            column=None,
            value=None,
        )
    for name, column in zip(names, columns, strict=True):
        if column.type in _TEMPORAL or types[name] == pa.string():
            continue
        for number, value in enumerate(text.column(name).to_pylist(), 1):
            if value is not None and not _fits(value, types[name]):
                return _fault(table, column, value, number)
    return ValueFault(
        f"duckdb table {table!r}: a value does not fit its column", column=None, value=None
    )


def _fits(value: str, target: pa.DataType) -> bool:
    """Whether Arrow's reader takes `value` (a field's text) as `target`."""
    field = b'"' + value.encode().replace(b'"', b'""') + b'"\n'
    try:
        _read(field, ["v"], {"v": target})
    except pa.ArrowInvalid:
        return False
    return True


def _fault(table: str, column: Column, value: object, row: int) -> ValueFault:
    return ValueFault(
        f"duckdb table {table!r}: cannot write it as {duck_types.declared(column)}",
        column=column.name,
        value=value,
        row=row,
    )
