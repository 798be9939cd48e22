"""CSV rendered by PostgreSQL itself, for PostgreSQL → a `csv_in`
destination (DuckDB) without operators: the server spells each value in C,
in its own process, and the destination parses the text into columns; no
value becomes a Python object on the way (decoding them cost four fifths of
a PostgreSQL → DuckDB run).

The spelling is the hand-off dialect (setu_engine/movement/transfer.py,
CsvSource), which is PostgreSQL's own CSV output under the read
transaction's settings (CSV_SETTINGS) for every neutral type but bytes,
rendered as bare hex digits, and timestamptz, as its wall time in UTC. A
date or timestamp PostgreSQL holds outside years 1-9999 (BC, or a fifth
digit) keeps PostgreSQL's spelling, which the reader refuses as the rows
path refuses the value.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import asyncpg

from setu_engine.kinds import CopyBatch
from setu_engine.providers.postgres import copying
from setu_engine.values.types import Column

# Set in the read's transaction: ISO dates (the order of day and month only
# steers input), floats in their shortest exact digits (any value above 0
# since PostgreSQL 12). The session's TimeZone stays: a column read as text
# (a tstzrange) spells its instants as the rows path does.
CSV_SETTINGS = (
    "SET LOCAL DateStyle = 'ISO'",
    "SET LOCAL extra_float_digits = 1",
)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _expr(column: Column) -> str:
    ref = f"t.{_quote(column.name)}"
    if column.type == "bytes":
        return f"encode({ref}, 'hex')"
    if column.type == "timestamptz":
        return f"({ref} AT TIME ZONE 'UTC')"  # its UTC wall time, whatever the session's zone
    return ref


def copy_sql(columns: Sequence[Column], query: str) -> str:
    """The query a CSV COPY of `query` (which selects the columns as their
    neutral types) runs, each value in the hand-off dialect."""
    picks = ", ".join(_expr(c) for c in columns)
    return f"SELECT {picks} FROM ({query}) AS t"


async def copy_whole(conn: asyncpg.Connection, query: str) -> CopyBatch:
    """One CSV COPY of `query`, as one batch (a range of a table)."""
    data, rows = await copying.copy_whole(conn, query, "csv")
    return CopyBatch(data, rows)


def split(conn: asyncpg.Connection, query: str, batch_rows: int) -> AsyncIterator[CopyBatch]:
    """One CSV COPY of `query`, in batches of about `batch_rows` records as
    it arrives (copying.copy_split)."""
    return copying.copy_split(conn, query, "csv", CsvSplitter(batch_rows))


class CsvSplitter:
    """Cuts one CSV COPY into batches of whole records as it arrives. A
    quoted field may hold a newline: a newline ends a record only where the
    quotes before it are even (a quote inside a field is doubled)."""

    def __init__(self, batch_rows: int) -> None:
        self._batch_rows = batch_rows
        self._pieces: list[bytes] = []
        self._size = 0
        # Records complete in _pieces, where the last of them ends, and
        # whether a quoted field is open at the end of _pieces.
        self._rows = 0
        self._end = 0
        self._odd = False

    def feed(self, chunk: bytes) -> list[CopyBatch]:
        if not self._odd and b'"' not in chunk:
            # The common chunk: every newline in it ends a record.
            last = chunk.rfind(b"\n")
            if last >= 0:
                self._rows += chunk.count(b"\n")
                self._end = self._size + last + 1
        else:
            at = self._size
            for line in chunk.split(b"\n")[:-1]:
                at += len(line) + 1
                if line.count(b'"') % 2:
                    self._odd = not self._odd
                if not self._odd:
                    self._rows += 1
                    self._end = at
            if chunk.rsplit(b"\n", 1)[-1].count(b'"') % 2:
                self._odd = not self._odd
        self._pieces.append(chunk)
        self._size += len(chunk)
        if self._rows < self._batch_rows:
            return []
        data = b"".join(self._pieces)
        batch = CopyBatch(data[: self._end], self._rows)
        rest = data[self._end :]
        self._pieces = [rest] if rest else []
        self._size, self._rows, self._end = len(rest), 0, 0
        return [batch]

    def finish(self) -> CopyBatch | None:
        data = b"".join(self._pieces)
        self._pieces = []
        if self._odd or self._end != len(data):
            raise ValueError("CSV COPY ended inside a record")
        return CopyBatch(data, self._rows) if data else None
