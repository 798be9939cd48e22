"""Upsert and merge into a file in bounded memory.

The written rows are matched against the file's old rows by key. Holding
them in a dict costs memory in proportion to the table (626 MiB for 336,776
rows of 19 columns); here they spill to a temporary SQLite database instead,
keyed by the key's bytes, so memory stays flat whatever the table size and
SQLite's page cache (a few MiB) is all that is held.

    written(seq INTEGER PRIMARY KEY, k UNIQUE, row, done)

- `k`: the key values, pickled after normalising what compares equal but
  pickles apart (Decimal('1.0') and Decimal('1.00')).
- `seq`: the order a key was first written, so new keys land in the order
  they came (the last row of a key wins, in its first key's place). Rows
  are appended in this order; only the small key index is random access.
- `row`: for a text format (JSON Lines, CSV), the row's line already
  encoded by the file's encoder (`Lines`): the merge writes those bytes as
  they are, so a written row is encoded once and never decoded; for
  Parquet, the row pickled (only this process writes and reads it).
- `done`: set when an old row of the key was replaced, so the new keys are
  the rows not done.

Memory: SQLite's page cache is capped at CACHE_KIB, small enough that a
table of a few hundred thousand rows already fills it (so peak memory is
the same at 200,000 rows and at 1,000,000: scripts/bench_copy.py prints
both); the lookups of old keys stay fast through the OS's file cache.
"""

from __future__ import annotations

import asyncio
import itertools
import pickle
import sqlite3
import tempfile
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Sequence,
)
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

from setu_engine.errors import PermanentError, ValueFault
from setu_engine.kinds import CopyBatch
from setu_engine.values.types import Batch, Row

T = TypeVar("T")


@dataclass(frozen=True)
class Lines:
    """A text format's line encoder and line writer: the spill holds each
    written row as its encoded line (with its terminator)."""

    encode: Callable[[Sequence[Row]], list[bytes]]
    write: Callable[[CopyBatch], Awaitable[None]]


# Keys looked up per statement (SQLite's default limit on variables is 32766).
LOOKUP_CHUNK = 500
# Rows fetched per call when writing the new keys out.
FETCH_ROWS = 10_000
# Rows encoded and inserted per statement.
PUT_ROWS = 10_000

_SCHEMA = """
CREATE TABLE written (seq INTEGER PRIMARY KEY, k BLOB NOT NULL UNIQUE, row BLOB NOT NULL,
                      done INTEGER NOT NULL DEFAULT 0);
"""
_PUT = """
INSERT INTO written (seq, k, row) VALUES (?, ?, ?)
ON CONFLICT (k) DO UPDATE SET row = excluded.row
"""
# SQLite's page cache (KiB): what the spill may hold in memory, whatever
# the table's size. Larger buys little (lookups hit the OS's file cache)
# and makes peak memory grow with the table until the cache is full.
CACHE_KIB = 4 * 1024


def _normal(value: Any) -> Any:
    if isinstance(value, Decimal) and value.is_finite():
        return value.normalize()
    if isinstance(value, float) and value == 0.0:
        return 0.0  # -0.0 == 0.0
    return value


_BIAS = 1 << 63


def key_bytes(row: Row, positions: list[int]) -> bytes:
    """The key's bytes. A single integer or text key (the usual kind) is
    written so its bytes sort as its values do: keys that come in order
    append to SQLite's index instead of landing at random pages of it."""
    if len(positions) == 1:
        value = row[positions[0]]
        if type(value) is int and -_BIAS <= value < _BIAS:
            return b"i" + (value + _BIAS).to_bytes(8, "big")
        if type(value) is str:
            return b"s" + value.encode("utf-8", "surrogatepass")
    values = tuple(_normal(row[i]) for i in positions)
    try:
        hash(values)
    except TypeError as exc:
        raise PermanentError(
            f"key value {values!r:.100} cannot be compared (a JSON value?): key on other columns"
        ) from exc
    return pickle.dumps(values, protocol=pickle.HIGHEST_PROTOCOL)


class Spill:
    """The written rows of one upsert or merge, on disk, by key."""

    def __init__(self, folder: Path | None = None, lines: Lines | None = None) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="setu-merge-", dir=folder)
        self._db = sqlite3.connect(Path(self._dir.name) / "written.db", check_same_thread=False)
        self._db.executescript(
            "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; "
            f"PRAGMA cache_size = -{CACHE_KIB}; PRAGMA temp_store = FILE;" + _SCHEMA
        )
        self._seq = 0
        self.count = 0
        self.thread: _OneThread | None = None
        self.lines = lines

    def close(self) -> None:
        self._db.close()
        self._dir.cleanup()
        if self.thread is not None:
            self.thread.shutdown()

    def put(self, rows: Batch, positions: list[int]) -> None:
        # In slices, so a batch's encoded lines are never all held at once.
        for at in range(0, len(rows), PUT_ROWS):
            self._put(rows[at : at + PUT_ROWS], positions)

    def _put(self, rows: Batch, positions: list[int]) -> None:
        start = self._seq
        stored: Iterable[Any]
        if self.lines is None:
            stored = (pickle.dumps(row, protocol=5) for row in rows)
        else:
            try:
                stored = self.lines.encode(rows)
            except ValueFault as fault:
                raise fault.located(None, start) from fault
        self._seq += len(rows)
        self.count += len(rows)
        keys = (key_bytes(row, positions) for row in rows)
        self._db.executemany(_PUT, zip(itertools.count(start), keys, stored))

    def take(self, keys: list[bytes]) -> tuple[dict[bytes, Any], set[bytes]]:
        """(the written rows (or lines) of those keys not taken yet, now
        marked taken; every one of the keys that was written, taken before
        or not)."""
        found: dict[bytes, Any] = {}
        loads = pickle.loads if self.lines is None else bytes
        known: set[bytes] = set()
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), LOOKUP_CHUNK):
            chunk = unique[start : start + LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            cursor = self._db.execute(
                f"SELECT k, done, row FROM written WHERE k IN ({marks})", chunk
            )
            for key, done, row in cursor:
                known.add(key)
                if not done:
                    found[key] = loads(row)
        if found:
            self._db.executemany("UPDATE written SET done = 1 WHERE k = ?", ((k,) for k in found))
        return found, known

    def rest(self) -> Iterator[Batch | CopyBatch]:
        """The written rows no old row took, in the order their keys came
        (batches of rows; or, with lines, of their lines)."""
        cursor = self._db.execute("SELECT row FROM written WHERE done = 0 ORDER BY seq")
        while chunk := cursor.fetchmany(FETCH_ROWS):
            if self.lines is None:
                yield [pickle.loads(row) for (row,) in chunk]
            else:
                yield CopyBatch(b"".join(row for (row,) in chunk), len(chunk))


class _OneThread:
    """Runs a spill's work on one thread of its own, so its SQLite
    connection is only ever used from that thread."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="setu-spill")

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, call, *args)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False)


async def spill(
    batches: AsyncIterator[Batch], positions: list[int], lines: Lines | None = None
) -> Spill:
    """Every written batch, spilled by key (as encoded lines, given
    `lines`); the caller closes the Spill."""
    thread = _OneThread()
    spilled = await thread.run(Spill, None, lines)
    spilled.thread = thread
    try:
        async for batch in batches:
            await thread.run(spilled.put, batch, positions)
    except BaseException:
        await thread.run(spilled.close)
        raise
    return spilled


async def merge(
    write: Callable[[Batch], Awaitable[None]],
    old: AsyncGenerator[list[Row], None],
    written: Spill,
    positions: list[int],
    keep_old: bool,
) -> None:
    """Old rows in place, each replaced by the written row of its key (and
    dropped when there is none, unless keep_old); then the new keys."""
    run = written.thread.run if written.thread is not None else asyncio.to_thread
    lines = written.lines
    async with aclosing(old):
        async for rows in old:
            if lines is None:
                await write(await run(_replace, rows, written, positions, keep_old))
            else:
                await lines.write(await run(_replace_lines, rows, written, positions, keep_old))
    rest = written.rest()
    while (batch := await run(next, rest, None)) is not None:
        if isinstance(batch, CopyBatch):
            assert lines is not None
            await lines.write(batch)
        else:
            await write(batch)


def _replace(rows: list[Row], written: Spill, positions: list[int], keep_old: bool) -> Batch:
    return [row for row, _ in _replaced(rows, written, positions, keep_old)]


def _replaced(
    rows: list[Row], written: Spill, positions: list[int], keep_old: bool
) -> Iterator[tuple[Any, bool]]:
    """Each output item in order: (the written replacement, True) or (the
    old row kept, False)."""
    keys = [key_bytes(row, positions) for row in rows]
    # A key the file holds twice: its first row is replaced, later ones dropped.
    taken, seen = written.take(keys)
    for key, row in zip(keys, rows, strict=True):
        replacement = taken.pop(key, None)
        if replacement is not None:
            yield replacement, True
        elif key not in seen and keep_old:
            yield row, False


def _replace_lines(
    rows: list[Row], written: Spill, positions: list[int], keep_old: bool
) -> CopyBatch:
    """An old batch as lines: replacements as the spill holds them, old rows
    kept re-encoded (an old row the file held reads back and encodes alike)."""
    assert written.lines is not None
    out = list(_replaced(rows, written, positions, keep_old))
    kept = [row for row, replaced in out if not replaced]
    encoded = iter(written.lines.encode(kept) if kept else ())
    data = b"".join(item if replaced else next(encoded) for item, replaced in out)
    return CopyBatch(data, len(out))
