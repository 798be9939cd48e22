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
- `row`: the row, pickled (only this process writes and reads it).
- `done`: set when an old row of the key was replaced, so the new keys are
  the rows not done.
"""

from __future__ import annotations

import asyncio
import pickle
import sqlite3
import tempfile
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

from setu_agent.engine.providers.base import PermanentError
from setu_agent.engine.types import Batch, Row

T = TypeVar("T")

# Keys looked up per statement (SQLite's default limit on variables is 32766).
LOOKUP_CHUNK = 500
# Rows fetched per call when writing the new keys out.
FETCH_ROWS = 10_000

_SCHEMA = """
CREATE TABLE written (seq INTEGER PRIMARY KEY, k BLOB NOT NULL UNIQUE, row BLOB NOT NULL,
                      done INTEGER NOT NULL DEFAULT 0);
"""
_PUT = """
INSERT INTO written (seq, k, row) VALUES (?, ?, ?)
ON CONFLICT (k) DO UPDATE SET row = excluded.row
"""
# SQLite's page cache (KiB): what the spill may hold in memory, whatever
# the table's size.
CACHE_KIB = 32 * 1024


def _normal(value: Any) -> Any:
    if isinstance(value, Decimal) and value.is_finite():
        return value.normalize()
    if isinstance(value, float) and value == 0.0:
        return 0.0  # -0.0 == 0.0
    return value


def key_bytes(row: Row, positions: list[int]) -> bytes:
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

    def __init__(self, folder: Path | None = None) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="setu-merge-", dir=folder)
        self._db = sqlite3.connect(Path(self._dir.name) / "written.db", check_same_thread=False)
        self._db.executescript(
            "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; "
            f"PRAGMA cache_size = -{CACHE_KIB}; PRAGMA temp_store = FILE;" + _SCHEMA
        )
        self._seq = 0
        self.count = 0
        self.thread: _OneThread | None = None

    def close(self) -> None:
        self._db.close()
        self._dir.cleanup()
        if self.thread is not None:
            self.thread.shutdown()

    def put(self, rows: Batch, positions: list[int]) -> None:
        start = self._seq
        self._seq += len(rows)
        self.count += len(rows)
        self._db.executemany(
            _PUT,
            (
                (start + i, key_bytes(row, positions), pickle.dumps(row, protocol=5))
                for i, row in enumerate(rows)
            ),
        )

    def take(self, keys: list[bytes]) -> tuple[dict[bytes, Row], set[bytes]]:
        """(the written rows of those keys not taken yet, now marked taken;
        every one of the keys that was written, taken before or not)."""
        found: dict[bytes, Row] = {}
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
                    found[key] = pickle.loads(row)
        if found:
            self._db.executemany("UPDATE written SET done = 1 WHERE k = ?", ((k,) for k in found))
        return found, known

    def rest(self) -> Iterator[Batch]:
        """The written rows no old row took, in the order their keys came."""
        cursor = self._db.execute("SELECT row FROM written WHERE done = 0 ORDER BY seq")
        while chunk := cursor.fetchmany(FETCH_ROWS):
            yield [pickle.loads(row) for (row,) in chunk]


class _OneThread:
    """Runs a spill's work on one thread of its own, so its SQLite
    connection is only ever used from that thread."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="setu-spill")

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, call, *args)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False)


async def spill(batches: AsyncIterator[Batch], positions: list[int]) -> Spill:
    """Every written batch, spilled by key; the caller closes the Spill."""
    thread = _OneThread()
    spilled = await thread.run(Spill)
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
    async with aclosing(old):
        async for rows in old:
            await write(await run(_replace, rows, written, positions, keep_old))
    rest = written.rest()
    while batch := await run(next, rest, None):
        await write(batch)


def _replace(rows: list[Row], written: Spill, positions: list[int], keep_old: bool) -> Batch:
    keys = [key_bytes(row, positions) for row in rows]
    # A key the file holds twice: its first row is replaced, later ones dropped.
    taken, seen = written.take(keys)
    out: Batch = []
    for key, row in zip(keys, rows, strict=True):
        replacement = taken.pop(key, None)
        if replacement is not None:
            out.append(replacement)
        elif key not in seen and keep_old:
            out.append(row)
    return out
