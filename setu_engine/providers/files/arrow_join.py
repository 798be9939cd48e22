"""Upsert and merge into a Parquet file as a hash join on Arrow tables,
for a key of one column of a type Arrow compares as Setu does.

merge.py joins row by row: each written row's key is built in Python and
each old row's key decoded from the file, which made an upsert of every row
of a Parquet file ten times its plain write (most of it decoding the CSV
hand-off into rows only to convert them back to Arrow). Here no value
becomes a Python object on the way:

- The written rows (the hand-off's Arrow tables, or batches converted once
  as the plain write converts them) are appended to an Arrow IPC file in a
  temporary folder while they come, and read back whole once every one has.
- Their key column gives the distinct keys in the order they first came
  (`pyarrow.compute.unique`) and, per key, its last written row: the last
  written value wins, in its first row's place.
- The old file's key column is read first, alone, and every old row's
  key looked up among those keys at once (`index_in`, one hash table in
  C; one per old batch would build it again for each). Then each record
  batch of the old file is rewritten: an old row whose key was written is
  replaced by that key's value, once (a key the file holds twice keeps
  only its first row, replaced); an old row whose key was not written is
  kept as its bytes are (upsert) or dropped (merge). The output batch is
  gathered by `take`.
- Then the written keys no old row took, in the order they first came.

The output is the same as merge.py's, row for row; tests hold the two to
each other. Keys of other kinds (several columns, floats with their -0.0
and NaN, JSON, UUID, arrays) stay with merge.py, as does an old batch
whose columns do not have the file's types (a file another writer made, a
column the file lacks): that batch is converted as a read converts it.

Memory: the written rows as Arrow holds them (about their size in a
Parquet file uncompressed), their distinct keys and an integer per key;
the old file streams JOIN_ROWS rows at a time (parquet.py), its key column
read whole first.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from setu_engine.values.types import Column

# The neutral types whose Arrow values are equal exactly when Setu's key
# comparison (merge.key_bytes) calls them equal: integers, text, dates,
# instants, booleans, and decimals of one scale (the file's own).
KEY_TYPES = frozenset(
    {
        "boolean",
        "smallint",
        "integer",
        "bigint",
        "text",
        "numeric",
        "date",
        "timestamp",
        "timestamptz",
    }
)
# Written rows gathered per output batch of the new keys.
REST_ROWS = 65_536


def joinable(columns: Sequence[Column], positions: Sequence[int], schema: pa.Schema) -> bool:
    """Whether an upsert keyed on `positions` can be joined here."""
    if len(positions) != 1:
        return False
    column = columns[positions[0]]
    type_ = schema.field(column.name).type
    return column.type in KEY_TYPES and not pa.types.is_nested(type_)


def _positions(count: int) -> pa.Array:
    return pa.array(range(count), pa.int64())


class Written:
    """The written rows of one upsert or merge, as Arrow, by key."""

    def __init__(self, schema: pa.Schema, key: str) -> None:
        self.schema = schema
        self.key = key
        self.count = 0
        self._dir = tempfile.TemporaryDirectory(prefix="setu-merge-")
        self._path = Path(self._dir.name) / "written.arrow"
        self._sink = pa.OSFile(str(self._path), "wb")
        self._ipc = pa.ipc.new_file(self._sink, schema)
        self._table: pa.Table | None = None
        # The distinct written keys in first-come order, and each one's last row.
        self._keys = pa.array([], schema.field(key).type)
        self._last = pa.array([], pa.int64())
        # Per old row: the distinct key it matches (null: none), and whether
        # it is the first old row to match it (the one replaced).
        self._matches = pa.array([], pa.int32())
        self._first = pa.array([], pa.bool_())
        # The distinct keys some old row matched.
        self._taken = pa.array([], pa.int32())

    def put(self, data: pa.Table | pa.RecordBatch) -> None:
        for batch in data.to_batches() if isinstance(data, pa.Table) else [data]:
            if batch.num_rows:
                self._ipc.write_batch(batch)
                self.count += batch.num_rows

    def seal(self) -> None:
        """Every written row put: the distinct keys and each one's last row."""
        self._ipc.close()
        self._sink.close()
        # One contiguous table: a take from a chunked one joins its chunks
        # first, every call (an upsert of a million rows took three times
        # as long), so the rows move from the file into memory once here.
        self._table = pa.ipc.open_file(pa.memory_map(str(self._path))).read_all().combine_chunks()
        column = self._table.column(self.key).combine_chunks()
        self._keys = pc.unique(column)
        # index_in answers a value's first place in value_set: its first
        # place in the column reversed is its last in the column.
        backwards = pc.index_in(self._keys, value_set=column[::-1]).cast(pa.int64())
        self._last = pc.subtract(len(column) - 1, backwards)

    def probe(self, old_keys: pa.ChunkedArray) -> None:
        """Looks up every old row's key at once: one hash table of the
        written keys (index_in builds one per call, so a call per old batch
        would build it again for each)."""
        matches = pc.index_in(old_keys, value_set=self._keys).combine_chunks()
        taken = pc.drop_null(pc.unique(matches))
        # Where each matched key first comes among the old rows.
        firsts = pc.index_in(taken, value_set=matches)
        self._matches = matches
        self._first = pc.is_in(_positions(len(matches)), value_set=firsts)
        self._taken = taken

    def replaced(self, old: pa.RecordBatch, before: int, keep_old: bool) -> pa.Table:
        """An old batch (of the file's schema), the rows before it in the
        file, with its written rows in place."""
        assert self._table is not None
        count = old.num_rows
        matches = self._matches.slice(before, count)
        old_table = pa.Table.from_batches([old])
        if matches.null_count == count:
            return old_table if keep_old else old_table.slice(0, 0)
        matched = pc.is_valid(matches)
        # An old row stays as a written one (the first of its key), as
        # itself (no key of it written, under upsert), or not at all.
        placed = pc.and_(matched, self._first.slice(before, count))
        if keep_old:
            placed = pc.or_(placed, pc.invert(matched))
        # Old row i is row i of `both`, its written row is row count + i.
        written = self._table.take(pc.take(self._last, pc.fill_null(matches, 0)))
        both = pa.concat_tables([old_table, written])
        positions = _positions(count)
        order = pc.if_else(matched, pc.add(positions, count), positions)
        return both.take(pc.filter(order, placed))

    def rest(self) -> Iterator[pa.Table]:
        """The written keys no old row took, in the order they first came."""
        assert self._table is not None
        untaken = pc.invert(pc.is_in(_positions(len(self._keys)), value_set=self._taken))
        left = pc.filter(self._last, untaken)
        for at in range(0, len(left), REST_ROWS):
            yield self._table.take(left.slice(at, REST_ROWS))

    def close(self) -> None:
        self._table = None
        if not self._sink.closed:
            self._sink.close()
        self._dir.cleanup()


def conformed(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch | None:
    """An old batch as a batch of the file's schema, if its columns are of
    the schema's types already (None: convert it as a read would)."""
    names = batch.schema.names
    if any(name not in names for name in schema.names):
        return None
    arrays = [batch.column(names.index(name)) for name in schema.names]
    if any(array.type != field.type for array, field in zip(arrays, schema, strict=True)):
        return None
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


@dataclass(frozen=True)
class OldFile:
    """The file being rewritten: its key column whole (read first, alone),
    then its record batches, each with the rows before it."""

    keys: Callable[[], Awaitable[pa.ChunkedArray]]
    batches: AsyncIterator[tuple[pa.RecordBatch, int]]


async def join(
    written_tables: AsyncIterator[pa.Table | pa.RecordBatch],
    old: OldFile | None,
    schema: pa.Schema,
    key: str,
    convert: Callable[[pa.RecordBatch, int], pa.RecordBatch],
    write: Callable[[pa.Table], Any],
    keep_old: bool,
) -> int:
    """Writes the old file's rows joined with the written ones; the number
    of rows written to it. `convert` turns an old batch whose types are not
    the file's (and the rows before it) into one that is."""
    written = await asyncio.to_thread(Written, schema, key)
    try:
        async for table in written_tables:
            await asyncio.to_thread(written.put, table)
        await asyncio.to_thread(written.seal)
        if old is not None:
            await asyncio.to_thread(written.probe, await old.keys())
            async for batch, before in old.batches:
                own = conformed(batch, schema)
                if own is None:
                    own = await asyncio.to_thread(convert, batch, before)
                await write(await asyncio.to_thread(written.replaced, own, before, keep_old))
        rest = written.rest()
        while (table := await asyncio.to_thread(next, rest, None)) is not None:
            await write(table)
        return written.count
    finally:
        await asyncio.to_thread(written.close)
