"""Upsert and merge into a Parquet file as a hash join on Arrow tables,
for a key of one column of a type Arrow compares as Setu does.

merge.py joins row by row: each written row's key is built in Python and
each old row's key decoded from the file, which made an upsert of every row
of a Parquet file ten times its plain write (most of it decoding the CSV
hand-off into rows only to convert them back to Arrow). Here no value
becomes a Python object on the way:

- The written rows (the hand-off's Arrow tables, or batches converted once
  as the plain write converts them) are appended to an Arrow IPC file in a
  temporary folder and memory-mapped back, so they stay on disk.
- Their key column gives the distinct keys in the order they first came
  (`pyarrow.compute.unique`) and, per key, its last written row: the last
  written value wins, in its first row's place.
- Each record batch of the old file is probed against those keys
  (`index_in`, a hash lookup in C): an old row whose key was written is
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

Memory: the written keys' column, their distinct values and an int per
distinct key (some 30 bytes a row for a bigint key); the values stay in
the memory-mapped file; the old file streams a batch at a time.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
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
        self._keys: pa.Array | None = None
        # Per distinct key (in first-come order): its last written row, and
        # whether an old row has taken it.
        self._last: list[int] = []
        self._taken = bytearray()

    def put(self, data: pa.Table | pa.RecordBatch) -> None:
        for batch in data.to_batches() if isinstance(data, pa.Table) else [data]:
            if batch.num_rows:
                self._ipc.write_batch(batch)
                self.count += batch.num_rows

    def seal(self) -> None:
        """Every written row put: the distinct keys and each one's last row."""
        self._ipc.close()
        self._sink.close()
        self._table = pa.ipc.open_file(pa.memory_map(str(self._path))).read_all()
        column = self._table.column(self.key)
        self._keys = pc.unique(column)
        last = [0] * len(self._keys)
        for row, distinct in enumerate(pc.index_in(column, value_set=self._keys).to_pylist()):
            last[distinct] = row
        self._last = last
        self._taken = bytearray(len(last))

    def replaced(self, old: pa.RecordBatch, keep_old: bool) -> pa.Table:
        """An old batch (of the file's schema) with its written rows in place."""
        assert self._table is not None
        matches = pc.index_in(old.column(self.key), value_set=self._keys)
        old_table = pa.Table.from_batches([old])
        if matches.null_count == len(matches):
            return old_table if keep_old else old_table.slice(0, 0)
        last, taken = self._last, self._taken
        kept: list[int] = []  # old rows kept
        values: list[int] = []  # written rows, in the order they are placed
        plan: list[int] = []  # per output row: kept row i as i, written row j as ~j
        for at, distinct in enumerate(matches.to_pylist()):
            if distinct is None:
                if keep_old:
                    plan.append(len(kept))
                    kept.append(at)
            elif not taken[distinct]:
                taken[distinct] = 1
                plan.append(~len(values))
                values.append(last[distinct])
        taken_rows = self._table.take(pa.array(values, pa.int64()))
        if not kept:
            return taken_rows
        both = pa.concat_tables([old_table.take(pa.array(kept, pa.int64())), taken_rows])
        offset = len(kept)
        order = [i if i >= 0 else offset + ~i for i in plan]
        return both.take(pa.array(order, pa.int64()))

    def rest(self) -> Iterator[pa.Table]:
        """The written keys no old row took, in the order they first came."""
        assert self._table is not None
        taken = self._taken
        left = [row for distinct, row in enumerate(self._last) if not taken[distinct]]
        for at in range(0, len(left), REST_ROWS):
            yield self._table.take(pa.array(left[at : at + REST_ROWS], pa.int64()))

    def close(self) -> None:
        self._table = self._keys = None
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


async def join(
    written_tables: AsyncIterator[pa.Table | pa.RecordBatch],
    old_batches: AsyncIterator[tuple[pa.RecordBatch, int]] | None,
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
        if old_batches is not None:
            async for batch, before in old_batches:
                own = conformed(batch, schema)
                if own is None:
                    own = await asyncio.to_thread(convert, batch, before)
                await write(await asyncio.to_thread(written.replaced, own, keep_old))
        rest = written.rest()
        while (table := await asyncio.to_thread(next, rest, None)) is not None:
            await write(table)
        return written.count
    finally:
        await asyncio.to_thread(written.close)
